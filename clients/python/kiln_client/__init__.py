"""A client of kiln's daemon (``kiln serve``), standard library only.

    from kiln_client import Client
    client = Client("/path/to/data/kiln.sock")          # or "http://127.0.0.1:8765", token=...
    session = client.session("s1")
    record = session.execute("x = 20\\nx + 1")           # record.result == "21"
    for event in session.events(after=0, follow=False):
        print(event.seq, event.kind)

Every problem the daemon answers is raised as a ``Problem`` subclass chosen by its
stable code: ``NotFound``, ``Busy``, ``Conflict``, ``Stopped``, ``Unauthorized``,
``InvalidRequest``, ``TooLarge``.
"""

from __future__ import annotations

import http.client
import json
import socket
import time
import urllib.parse
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Optional

__all__ = [
    "Client", "Session", "Record", "Event", "Problem", "NotFound", "Busy", "Conflict",
    "Stopped", "Unauthorized", "InvalidRequest", "TooLarge",
]

#: The longest a single long poll asks the daemon to wait, in milliseconds (its limit).
MAX_WAIT_MS = 300_000


class Problem(Exception):
    """A problem the daemon answered: RFC 9457 fields and kiln's stable ``code``."""

    def __init__(self, status: int, code: str, title: str = "", detail: str = "", type: str = ""):
        super().__init__(f"{title or status}: {detail} ({status} {code})")
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


def _problem_class(status: int, code: str) -> type:
    if code == "busy":
        return Busy
    return {400: InvalidRequest, 401: Unauthorized, 404: NotFound, 409: Conflict, 410: Stopped,
            413: TooLarge, 415: InvalidRequest}.get(status, Problem)


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
    limit: Optional[str] = None  # the limit that ended the cell: memory, cpu_seconds or timeout
    fresh_namespace: bool = False
    started_at: Optional[str] = None  # RFC 3339, UTC
    ended_at: Optional[str] = None  # None while running
    raw: dict = field(default_factory=dict, repr=False)

    @classmethod
    def _from(cls, d: dict) -> "Record":
        return cls(id=d["id"], session=d["session"], cell=d["cell"], generation=d["generation"],
                   status=d["status"], output=d.get("output") or [], truncated_bytes=d.get("truncated_bytes", 0),
                   error=d.get("error"), exception=d.get("exception"),
                   namespace_lost=d.get("namespace_lost", False), limit=d.get("limit"),
                   fresh_namespace=d.get("fresh_namespace", False),
                   started_at=d.get("started_at"), ended_at=d.get("ended_at"), raw=d)

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
class Event:
    """One event: a journal entry of the record, ``seq`` its sequence number. With
    ``kind == "output"`` it is a piece of a running cell's output as it came: ``record``
    has its execution_id (the cell's, c-N), index, stream and text."""

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
        if self.timeout is not None:
            sock.settimeout(self.timeout)
        sock.connect(self._path)
        self.sock = sock


class Client:
    """A client of one daemon: a Unix socket path, or an http:// URL with its token."""

    def __init__(self, socket_or_url: str, token: Optional[str] = None, timeout: Optional[float] = None):
        self._token = token
        self._timeout = timeout
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

    def _open(self, method: str, path: str, body: Any = None, headers: Optional[dict] = None):
        conn = self._connection(self._timeout)
        h = dict(headers or {})
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            h["Content-Type"] = "application/json"
        if self._token:
            h["Authorization"] = "Bearer " + self._token
        conn.request(method, path, body=data, headers=h)
        resp = conn.getresponse()
        if resp.status >= 400:
            raw = resp.read()
            conn.close()
            try:
                p = json.loads(raw)
            except ValueError:
                p = {"detail": raw.decode(errors="replace")}
            code = p.get("code", "")
            raise _problem_class(resp.status, code)(resp.status, code, p.get("title", ""),
                                                      p.get("detail", ""), p.get("type", ""))
        return conn, resp

    def _call(self, method: str, path: str, body: Any = None) -> tuple:
        conn, resp = self._open(method, path, body)
        try:
            data = resp.read()
        finally:
            conn.close()
        return resp.status, resp.getheader("Location"), json.loads(data) if data else None

    def _lines(self, path: str, headers: Optional[dict] = None) -> Iterator[dict]:
        conn, resp = self._open("GET", path, headers=headers)
        try:
            while True:
                line = resp.readline()
                if not line:
                    return
                yield json.loads(line)
        finally:
            conn.close()

    def session(self, id: Optional[str] = None, python: Optional[str] = None, cwd: Optional[str] = None,
                env: Optional[dict] = None, limits: Optional[dict] = None) -> "Session":
        """Opens session ``id`` (a fresh one when None), or attaches to it when it is open."""
        body = {k: v for k, v in {"id": id, "python": python, "cwd": cwd, "env": env, "limits": limits}.items()
                if v is not None}
        try:
            _, _, info = self._call("POST", "/v1/sessions", body)
        except Conflict as e:
            if e.code != "session_exists" or id is None:
                raise
            _, _, info = self._call("GET", "/v1/sessions/" + _q(id))
        return Session(self, info["id"])

    def sessions(self) -> list:
        """The daemon's sessions, as it describes them."""
        return self._call("GET", "/v1/sessions")[2]["sessions"]

    def run_program(self, code: str, limits: Optional[dict] = None) -> dict:
        """Runs a one-shot program (the fd-3 protocol) and returns its result."""
        body = {"code": code}
        if limits:
            body["limits"] = limits
        return self._call("POST", "/v1/programs:run", body)[2]


def _q(s: str) -> str:
    return urllib.parse.quote(s, safe="")


class Session:
    """A session the daemon holds."""

    def __init__(self, client: Client, id: str):
        self.client, self.id = client, id

    def info(self) -> dict:
        return self.client._call("GET", "/v1/sessions/" + _q(self.id))[2]

    def execute(self, code: str, timeout: Optional[float] = None,
                on_output: Optional[Callable[[str, str], None]] = None,
                idempotency_key: Optional[str] = None) -> Record:
        """Runs ``code`` as the session's next cell and returns its record.

        ``on_output(stream, text)`` is told each piece of output as it comes. A cell still
        running after ``timeout`` seconds is interrupted, and the record says how it ended.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        body: dict = {"code": code, "wait_ms": 0 if on_output else _wait_ms(deadline)}
        if idempotency_key is not None:
            body["idempotency_key"] = idempotency_key
        _, loc, rec = self.client._call("POST", "/v1/sessions/" + _q(self.id) + "/executions", body)
        if on_output is not None:
            live = self._follow(loc, on_output, deadline)
            rec = self._finish(loc, deadline)
            if not live:
                for o in rec["output"] or []:
                    if o["stream"] != "result":
                        on_output(o["stream"], o["text"])
            return Record._from(rec)
        if rec["status"] == "running":
            rec = self._finish(loc, deadline)
        return Record._from(rec)

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
                    return self.client._call("POST", loc + "/interrupt")[2]
                except Conflict as e:
                    if e.code != "not_running":
                        raise
                    return self.client._call("GET", loc)[2]
            rec = self.client._call("GET", loc + "?wait_ms=" + str(_wait_ms(deadline)))[2]
            if rec["status"] != "running":
                return rec

    def interrupt(self) -> Optional[Record]:
        """Interrupts the running cell, if any, and returns how it ended."""
        running = self.info().get("running")
        if not running:
            return None
        try:
            return Record._from(self.client._call("POST", "/v1/executions/" + _q(running) + "/interrupt")[2])
        except Conflict as e:
            if e.code != "not_running":
                raise
            return Record._from(self.client._call("GET", "/v1/executions/" + _q(running))[2])

    def send(self, text: str) -> dict:
        """Records ``text`` as an operator input, planned by the session's attention policy."""
        return self.client._call("POST", "/v1/sessions/" + _q(self.id) + "/inputs", {"text": text})[2]

    def stop(self) -> dict:
        return self.client._call("DELETE", "/v1/sessions/" + _q(self.id))[2]

    def events(self, after: Optional[int] = None, follow: bool = True) -> Iterator[Event]:
        """The session's durable events after ``after``; with ``follow`` it waits for new
        ones, and a dropped connection is resumed from the last event seen, with no gap."""
        last = after or 0
        while True:
            path = "/v1/sessions/%s/events?after=%d%s" % (_q(self.id), last, "" if follow else "&follow=0")
            try:
                for d in self.client._lines(path):
                    kind = d.get("kind")
                    if kind == "heartbeat":
                        continue
                    last = d["seq"]
                    yield Event(seq=d["seq"], kind=kind, session=d["session"], record=d.get("record"), raw=d)
            except (ConnectionResetError, http.client.IncompleteRead, socket.timeout):
                if not follow:
                    raise
                continue  # resumed after the last event seen; a daemon gone refuses, and that is raised
            if not follow:
                return


def _wait_ms(deadline: Optional[float]) -> int:
    if deadline is None:
        return MAX_WAIT_MS
    return max(0, min(MAX_WAIT_MS, int((deadline - time.monotonic()) * 1000)))
