"""A client of kiln's daemon (``kiln serve``), standard library only.

    from kiln_client import Client
    client = Client()          # the default data directory's socket; or a path, or
                               # "http://127.0.0.1:8765" with token=...
    session = client.session("s1")
    record = session.execute("x = 20\\nx + 1")           # record.result == "21"
    for event in session.events(after=0, follow=False):
        print(event.seq, event.kind)

Every problem the daemon answers is raised as a ``Problem`` subclass chosen by its
stable code: ``NotFound``, ``Busy``, ``Conflict``, ``Stopped``, ``Unauthorized``,
``InvalidRequest``, ``TooLarge``. A daemon that cannot be reached raises ``Unavailable``
(``Stopping`` when it answers that it is stopping), and a connection lost mid-request
``Disconnected`` (both ``TransportError``), once the calls that are safe to repeat have
been retried for ``retry_for`` seconds: reads, the opening of a session, and
``execute``, which sends an idempotency key, so that a retry is answered the first
execution and never runs the cell twice.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import time
import urllib.parse
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Optional

__all__ = [
    "Client", "Session", "Record", "Event", "Display", "Problem", "NotFound", "Busy", "Conflict",
    "Stopped", "Unauthorized", "InvalidRequest", "TooLarge", "Stopping", "TransportError", "Unavailable",
    "Disconnected", "CannotApply", "SettingsDiffer", "default_socket",
]

#: The longest a single long poll asks the daemon to wait, in milliseconds (its limit).
MAX_WAIT_MS = 300_000

#: How long, by default, calls safe to repeat are retried while the daemon cannot be
#: reached (a restart, say), in seconds.
DEFAULT_RETRY_FOR = 30.0


def default_socket(environ=None) -> str:
    """The socket of the daemon of the default data directory, as kiln finds it:
    ``$XDG_DATA_HOME/kiln/kiln.sock`` (an absolute XDG_DATA_HOME), else
    ``~/.local/share/kiln/kiln.sock``."""
    env = os.environ if environ is None else environ
    data = env.get("XDG_DATA_HOME", "")
    if data and os.path.isabs(data):
        return os.path.join(data, "kiln", "kiln.sock")
    home = env.get("HOME", "")
    if not home:
        raise Unavailable("no data directory: neither XDG_DATA_HOME nor HOME is set; name the socket")
    return os.path.join(home, ".local", "share", "kiln", "kiln.sock")


class TransportError(Exception):
    """The daemon could not be reached, or the connection to it was lost."""


class Unavailable(TransportError):
    """No daemon answers: its socket is absent, or refuses connections."""


class Disconnected(TransportError):
    """The connection to the daemon was lost before its answer was whole."""


class Problem(Exception):
    """A problem the daemon answered: RFC 9457 fields and kiln's stable ``code``."""

    def __init__(self, status: int, code: str, title: str = "", detail: str = "", type: str = ""):
        super().__init__(f"{detail or title or status} ({status} {code})")
        self.status, self.code, self.title, self.detail, self.type = status, code, title, detail, type


class NotFound(Problem):
    """An unknown session, execution or route (404)."""


class Busy(Problem):
    """A cell is running in the session (409 busy)."""


class Conflict(Problem):
    """Another conflict: the session exists, the execution is not running, a reused key (409)."""


class Stopped(Problem):
    """The session is stopped (410)."""


class Unauthorized(Problem):
    """No bearer token, or the wrong one (401)."""


class InvalidRequest(Problem):
    """A request the daemon could not take as sent (400, 415)."""


class TooLarge(Problem):
    """A body over the daemon's limit (413)."""


class CannotApply(Problem):
    """A sandbox profile or limit the daemon's host cannot give (422 cannot_apply): the
    kernel lacks a mechanism, or the profile has none for the limit."""


class SettingsDiffer(Conflict):
    """A session found open with another sandbox, network or limit than asked for (409
    settings_differ): they are fixed while it is open (stop it first). The daemon
    decides, and its detail names each."""


class Stopping(Problem, Unavailable):
    """The daemon is stopping (503 unavailable): an ``Unavailable`` too, retried as one."""


def _problem_class(status: int, code: str) -> type:
    if code == "busy":
        return Busy
    if code == "settings_differ":
        return SettingsDiffer
    if status == 503 and code == "unavailable":
        return Stopping
    return {400: InvalidRequest, 401: Unauthorized, 404: NotFound, 409: Conflict, 410: Stopped,
            413: TooLarge, 415: InvalidRequest, 422: CannotApply}.get(status, Problem)


@dataclass
class Record:
    """An execution as the daemon's durable record holds it."""

    id: str
    session: str
    cell: str
    generation: str
    status: str
    output: list = field(default_factory=list)
    truncated_bytes: int = 0
    error: Optional[str] = None
    exception: Optional[dict] = None  # {"type", "value", "traceback"} of what the cell raised
    namespace_lost: bool = False
    limit: Optional[str] = None  # the limit that ended the cell: memory, cpu_seconds, timeout or max_processes
    fresh_namespace: bool = False
    started_at: Optional[str] = None  # RFC 3339, UTC
    ended_at: Optional[str] = None  # None while running
    raw: dict = field(default_factory=dict, repr=False)
    _client: Optional["Client"] = field(default=None, repr=False, compare=False)

    @classmethod
    def _from(cls, d: dict, client: Optional["Client"] = None) -> "Record":
        return cls(id=d["id"], session=d["session"], cell=d["cell"], generation=d["generation"],
                   status=d["status"], output=d.get("output") or [], truncated_bytes=d.get("truncated_bytes", 0),
                   error=d.get("error"), exception=d.get("exception"),
                   namespace_lost=d.get("namespace_lost", False), limit=d.get("limit"),
                   fresh_namespace=d.get("fresh_namespace", False),
                   started_at=d.get("started_at"), ended_at=d.get("ended_at"), raw=d, _client=client)

    @property
    def displays(self) -> list:
        """The cell's display items, in order, as its output holds them."""
        return [o for o in self.output if o["stream"] == "display"]

    def display(self, n: int) -> "Display":
        """Display item ``n`` (from 0) in its richest type: an image's bytes, or its text."""
        if self._client is None:
            raise ValueError("a record not read through a Client")
        return self._client.display(self.id, n)

    def _text(self, stream: str) -> str:
        return "".join(o["text"] for o in self.output if o["stream"] == stream)

    @property
    def stdout(self) -> str:
        return self._text("stdout")

    @property
    def stderr(self) -> str:
        return self._text("stderr")

    @property
    def result(self) -> Optional[str]:
        """The repr of the cell's final expression, or None."""
        for o in self.output:
            if o["stream"] == "result":
                return o["text"]
        return None

    @property
    def running(self) -> bool:
        return self.status == "running"


@dataclass
class Display:
    """A display item of an execution: its MIME type and its bytes."""

    mime_type: str
    data: bytes

    @property
    def text(self) -> str:
        return self.data.decode("utf-8", errors="replace")


@dataclass
class Event:
    """One event: a journal entry of the record, ``seq`` its sequence number. A record
    that names a cell has its ``execution_id`` (``<session>:c-N``, as ``Record.id``) and
    ``cell``. With ``kind == "output"`` it is a piece of a running cell's output as it
    came: ``record`` has its execution_id, cell, index, stream and text."""

    seq: int
    kind: str
    session: str
    record: Any
    raw: dict = field(repr=False)


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: Optional[float]):
        super().__init__("kiln", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            if self.timeout is not None:
                sock.settimeout(self.timeout)
            sock.connect(self._path)
        except BaseException:
            sock.close()
            raise
        self.sock = sock


# The transport failures of http.client and socket: on connecting, no daemon answers;
# after, the connection was lost.
_CONNECT_ERRORS = (FileNotFoundError, ConnectionRefusedError, socket.gaierror)
_LOST_ERRORS = (http.client.RemoteDisconnected, http.client.IncompleteRead, http.client.BadStatusLine,
                ConnectionError, socket.timeout, OSError)


class Client:
    """A client of one daemon: a Unix socket path (default ``default_socket()``), or an
    http:// URL with its token. ``retry_for`` bounds, in seconds, how long a call safe to
    repeat is retried while the daemon cannot be reached; 0 retries none."""

    def __init__(self, socket_or_url: Optional[str] = None, token: Optional[str] = None,
                 timeout: Optional[float] = None, retry_for: float = DEFAULT_RETRY_FOR):
        self._token = token
        self._timeout = timeout
        self.retry_for = retry_for
        if socket_or_url is None:
            socket_or_url = default_socket()
        self.address = socket_or_url
        if socket_or_url.startswith(("http://", "https://")):
            u = urllib.parse.urlsplit(socket_or_url)
            self._unix = None
            self._https = u.scheme == "https"
            self._host = u.netloc
        else:
            self._unix = socket_or_url

    def _connection(self, timeout: Optional[float]) -> http.client.HTTPConnection:
        if self._unix is not None:
            return _UnixConnection(self._unix, timeout)
        if self._https:
            return http.client.HTTPSConnection(self._host, timeout=timeout)
        return http.client.HTTPConnection(self._host, timeout=timeout)

    def _open(self, method: str, path: str, body: Any = None, headers: Optional[dict] = None,
              raw: Optional[bytes] = None):
        conn = self._connection(self._timeout)
        h = dict(headers or {})
        data = raw
        if body is not None:
            data = json.dumps(body).encode()
            h["Content-Type"] = "application/json"
        if self._token:
            h["Authorization"] = "Bearer " + self._token
        try:
            conn.connect()
        except _CONNECT_ERRORS as e:
            conn.close()
            raise Unavailable(f"no daemon answers at {self.address}: {e}") from e
        try:
            conn.request(method, path, body=data, headers=h)
            resp = conn.getresponse()
        except _LOST_ERRORS as e:
            conn.close()
            raise Disconnected(f"{method} {path}: the connection to {self.address} was lost: {e!r}") from e
        if resp.status >= 400:
            raw_body = _read(conn, resp, method, path)
            conn.close()
            try:
                p = json.loads(raw_body)
            except ValueError:
                p = {"detail": raw_body.decode(errors="replace")}
            code = p.get("code", "")
            raise _problem_class(resp.status, code)(resp.status, code, p.get("title", ""),
                                                      p.get("detail", ""), p.get("type", ""))
        return conn, resp

    def _call(self, method: str, path: str, body: Any = None, retry: bool = False) -> tuple:
        """Sends one request and returns (status, Location, decoded body). With ``retry``
        (a request safe to repeat) a transport failure is retried for ``retry_for``."""
        return self._retrying(retry, lambda: self._call_once(method, path, body))

    def _call_once(self, method: str, path: str, body: Any) -> tuple:
        conn, resp = self._open(method, path, body)
        try:
            data = _read(conn, resp, method, path)
        finally:
            conn.close()
        return resp.status, resp.getheader("Location"), json.loads(data) if data else None

    def _retrying(self, retry: bool, fn: Callable[[], Any]) -> Any:
        deadline = None
        pause = 0.05
        while True:
            try:
                return fn()
            except TransportError:
                if not retry or self.retry_for <= 0:
                    raise
                now = time.monotonic()
                if deadline is None:
                    deadline = now + self.retry_for
                if now >= deadline:
                    raise
                time.sleep(min(pause, deadline - now))
                pause = min(pause * 2, 1.0)

    def _lines(self, path: str, headers: Optional[dict] = None) -> Iterator[dict]:
        """Opens a stream of JSON lines, at once, and returns its lines."""
        conn, resp = self._open("GET", path, headers=headers)

        def lines() -> Iterator[dict]:
            try:
                while True:
                    try:
                        line = resp.readline()
                    except _LOST_ERRORS as e:
                        raise Disconnected(f"GET {path}: the connection to {self.address} was lost: {e!r}") from e
                    if not line:
                        return
                    if not line.endswith(b"\n"):
                        raise Disconnected(f"GET {path}: the connection to {self.address} was lost mid-line")
                    yield json.loads(line)
            finally:
                conn.close()
        return lines()

    def session(self, id: Optional[str] = None, python: Optional[str] = None, cwd: Optional[str] = None,
                env: Optional[dict] = None, limits: Optional[dict] = None, route: Optional[str] = None,
                instructions: Optional[str] = None, instructions_file: Optional[str] = None,
                sandbox: Optional[str] = None, network: Optional[str] = None) -> "Session":
        """Opens session ``id`` (a fresh one when None), or attaches to it when it is open.

        ``route`` names the kiln.toml route of the session's agent; ``instructions`` (a text)
        or ``instructions_file`` (a file, relative to the daemon's workspace) are the
        session's own instructions, after the workspace's AGENTS.md.

        ``sandbox`` (``workspace``, ``strict`` or ``none``, the first two optionally
        ``:best-effort``) and ``network`` (``host``, ``none`` or TCP ports ``"80,443"``)
        confine the session; ``limits`` bound it: ``memory_bytes``, ``cpu_seconds`` and
        ``wall_ms`` per cell, ``max_processes`` (under a confining sandbox), and the
        ``*_timeout_ms`` of POST /v1/sessions. A session found open with another sandbox,
        network or limit raises ``SettingsDiffer``, as the daemon decides; one the host
        cannot give, ``CannotApply``. A session found open keeps its ``tool_timeout_ms``.
        """
        body = {k: v for k, v in {"id": id, "python": python, "cwd": cwd, "env": env, "limits": limits,
                                  "route": route, "instructions": instructions,
                                  "instructions_file": instructions_file, "sandbox": sandbox,
                                  "network": network}.items()
                if v is not None}
        try:
            _, _, info = self._call("POST", "/v1/sessions", body, retry=id is not None)
        except Conflict as e:
            if e.code != "session_exists" or id is None:
                raise
            _, _, info = self._call("GET", "/v1/sessions/" + _q(id), retry=True)
        return Session(self, info["id"])

    def sessions(self) -> list:
        """The daemon's sessions, as it describes them."""
        return self._call("GET", "/v1/sessions", retry=True)[2]["sessions"]

    def execution(self, execution_id: str) -> Record:
        """The record of execution ``execution_id`` (``<session>:c-N``) as it is now."""
        return Record._from(self._call("GET", "/v1/executions/" + _q(execution_id), retry=True)[2], self)

    def display(self, execution_id: str, n: int) -> Display:
        """Display item ``n`` (from 0) of execution ``execution_id``, in its richest type."""
        def once() -> Display:
            path = "/v1/executions/%s/display/%d" % (_q(execution_id), n)
            conn, resp = self._open("GET", path)
            try:
                data = _read(conn, resp, "GET", path)
            finally:
                conn.close()
            return Display(mime_type=(resp.getheader("Content-Type") or "").split(";")[0].strip(), data=data)
        return self._retrying(True, once)

    def approve(self, execution_id: str, reason: Optional[str] = None) -> dict:
        """Approves the held cell ``execution_id`` (``<session>:c-N``) of a session's agent:
        it runs. Returns the decision as recorded; a cell not held now raises Conflict
        (``not_held``). It is not retried: a lost answer may hide a decision recorded."""
        return self._decide(execution_id, "approve", reason)

    def reject(self, execution_id: str, reason: Optional[str] = None) -> dict:
        """Rejects the held cell ``execution_id``: it never runs, and the model reads
        ``reason`` as its result. As approve otherwise."""
        return self._decide(execution_id, "reject", reason)

    def _decide(self, execution_id: str, decision: str, reason: Optional[str]) -> dict:
        body = {"reason": reason} if reason else {}
        return self._call("POST", "/v1/executions/%s/%s" % (_q(execution_id), decision), body)[2]

    def events(self, after: Optional[int] = None, follow: bool = True,
               deltas: bool = False) -> Iterator[Event]:
        """Every session's durable events after ``after``, each naming its session, as
        ``Session.events`` gives one session's; with ``deltas``, every session's
        ``model.delta`` pieces too."""
        return self._events("/v1/events", after, follow, deltas)

    def _events(self, path: str, after: Optional[int], follow: bool, deltas: bool) -> Iterator[Event]:
        last = after or 0
        while True:
            query = "?after=%d%s%s" % (last, "" if follow else "&follow=0", "&deltas=1" if deltas else "")
            headers = {"Last-Event-ID": str(last)} if last else None
            try:
                lines = self._retrying(follow, lambda: self._lines(path + query, headers))
                for d in lines:
                    kind = d.get("kind")
                    if kind == "heartbeat":
                        continue
                    if kind == "model.delta":  # not a record: no seq, never replayed
                        yield Event(seq=0, kind=kind, session=d.get("session", ""), record=None, raw=d)
                        continue
                    last = d["seq"]
                    yield Event(seq=d["seq"], kind=kind, session=d["session"], record=d.get("record"), raw=d)
            except Disconnected:
                if not follow:
                    raise
                continue  # resumed after the last event seen
            if not follow:
                return

    def run_program(self, code: str, limits: Optional[dict] = None) -> dict:
        """Runs a one-shot program (the fd-3 protocol) and returns its result."""
        body = {"code": code}
        if limits:
            body["limits"] = limits
        return self._call("POST", "/v1/programs:run", body)[2]


def _read(conn: http.client.HTTPConnection, resp: http.client.HTTPResponse, method: str, path: str) -> bytes:
    try:
        return resp.read()
    except _LOST_ERRORS as e:
        conn.close()
        raise Disconnected(f"{method} {path}: the connection was lost: {e!r}") from e


def _q(s: str) -> str:
    return urllib.parse.quote(s, safe="")


class Session:
    """A session the daemon holds."""

    def __init__(self, client: Client, id: str):
        self.client, self.id = client, id

    def info(self) -> dict:
        return self.client._call("GET", "/v1/sessions/" + _q(self.id), retry=True)[2]

    def execute(self, code: str, timeout: Optional[float] = None,
                on_output: Optional[Callable[[str, str], None]] = None,
                idempotency_key: Optional[str] = None) -> Record:
        """Runs ``code`` as the session's next cell and returns its record.

        ``on_output(stream, text)`` is told each piece of output as it comes. A cell still
        running after ``timeout`` seconds is interrupted, and the record says how it ended.
        The request carries ``idempotency_key`` (a fresh one when None): retried across a
        lost connection or a daemon's restart, it is answered the first execution, in the
        state it is in (a cell the daemon died in is recorded failed), never run twice.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        key = idempotency_key if idempotency_key is not None else uuid.uuid4().hex
        body: dict = {"code": code, "wait_ms": 0 if on_output else _wait_ms(deadline), "idempotency_key": key}
        _, loc, rec = self.client._call("POST", "/v1/sessions/" + _q(self.id) + "/executions", body, retry=True)
        loc = loc or "/v1/executions/" + _q(rec["id"])
        if on_output is not None:
            try:
                live = self._follow(loc, on_output, deadline)
            except TransportError:
                live = False  # the record has it all
            rec = self._finish(loc, deadline)
            if not live:
                for o in rec["output"] or []:
                    if o["stream"] in ("stdout", "stderr"):
                        on_output(o["stream"], o["text"])
            return Record._from(rec, self.client)
        if rec["status"] == "running":
            rec = self._finish(loc, deadline)
        return Record._from(rec, self.client)

    def _follow(self, loc: str, on_output: Callable[[str, str], None], deadline: Optional[float]) -> bool:
        conn, resp = self.client._open("GET", loc + "/output")
        if deadline is not None and conn.sock is not None:
            conn.sock.settimeout(max(deadline - time.monotonic(), 0.001))
        try:
            while True:
                try:
                    line = resp.readline()
                except (socket.timeout, TimeoutError):
                    return True
                except _LOST_ERRORS as e:
                    raise Disconnected(f"GET {loc}/output: {e!r}") from e
                if not line:
                    return True
                chunk = json.loads(line)
                if chunk.get("kind") == "end":
                    return chunk["live"]
                on_output(chunk["stream"], chunk["text"])
        finally:
            conn.close()

    def _finish(self, loc: str, deadline: Optional[float]) -> dict:
        while True:
            if deadline is not None and time.monotonic() >= deadline:
                try:
                    return self.client._call("POST", loc + "/interrupt", retry=True)[2]
                except Conflict as e:
                    if e.code != "not_running":
                        raise
                    return self.client._call("GET", loc, retry=True)[2]
            rec = self.client._call("GET", loc + "?wait_ms=" + str(_wait_ms(deadline)), retry=True)[2]
            if rec["status"] != "running":
                return rec

    def interrupt(self) -> Optional[Record]:
        """Interrupts the running cell, if any, and returns how it ended."""
        running = self.info().get("running")
        if not running:
            return None
        try:
            rec = self.client._call("POST", "/v1/executions/" + _q(running) + "/interrupt", retry=True)[2]
        except Conflict as e:
            if e.code != "not_running":
                raise
            rec = self.client._call("GET", "/v1/executions/" + _q(running), retry=True)[2]
        return Record._from(rec, self.client)

    def send(self, text: str) -> dict:
        """Records ``text`` as an operator input, planned by the session's attention policy.
        It is not retried: a lost answer may hide an input recorded."""
        return self.client._call("POST", "/v1/sessions/" + _q(self.id) + "/inputs", {"text": text})[2]

    def stop(self) -> dict:
        return self.client._call("DELETE", "/v1/sessions/" + _q(self.id), retry=True)[2]

    def held(self) -> list:
        """The cells of the session's agent held for a decision now, oldest first: each a
        dict with ``cell``, ``turn``, ``reason``, ``held_at`` and ``restarted`` (held again
        after a daemon restart; approving it resumes its turn). Decide with
        ``Client.approve`` or ``Client.reject`` on ``<session>:<cell>``."""
        return self.client._call("GET", "/v1/sessions/" + _q(self.id) + "/held", retry=True)[2]["held"]

    def read_file(self, path: str) -> bytes:
        """The bytes of ``path``, relative to the session's directory."""
        def once() -> bytes:
            p = "/v1/sessions/%s/files/%s" % (_q(self.id), urllib.parse.quote(path))
            conn, resp = self.client._open("GET", p)
            try:
                return _read(conn, resp, "GET", p)
            finally:
                conn.close()
        return self.client._retrying(True, once)

    def write_file(self, path: str, data) -> int:
        """Writes ``data`` (bytes, or text as UTF-8) to ``path``, relative to the session's
        directory, whole or not at all, and returns the bytes written."""
        if isinstance(data, str):
            data = data.encode()
        def once() -> int:
            p = "/v1/sessions/%s/files/%s" % (_q(self.id), urllib.parse.quote(path))
            conn, resp = self.client._open("PUT", p, raw=bytes(data),
                                           headers={"Content-Type": "application/octet-stream"})
            try:
                return json.loads(_read(conn, resp, "PUT", p))["bytes"]
            finally:
                conn.close()
        return self.client._retrying(True, once)

    def events(self, after: Optional[int] = None, follow: bool = True,
               deltas: bool = False) -> Iterator[Event]:
        """The session's durable events after ``after``; with ``follow`` it waits for new
        ones. A lost connection, a daemon's restart too, is resumed from the last event
        seen (``Last-Event-ID``), with no gap, once the daemon answers again within the
        client's ``retry_for``. With ``deltas`` (and ``follow``), the pieces of the
        agent's model calls come between them as they stream: events of kind
        ``model.delta``, ``seq`` 0 and ``record`` None, the piece in ``raw`` (``turn``,
        ``call``, ``purpose``, ``delta``: text or arguments, ``text``); they are not
        records, and a resumed stream does not replay them."""
        return self.client._events("/v1/sessions/%s/events" % _q(self.id), after, follow, deltas)


def _wait_ms(deadline: Optional[float]) -> int:
    if deadline is None:
        return MAX_WAIT_MS
    return max(0, min(MAX_WAIT_MS, int((deadline - time.monotonic()) * 1000)))
