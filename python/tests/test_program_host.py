"""A test host for kiln.program (a helper module; it holds no tests): the Go host's side of docs/programs.md, in Python.

It installs the kiln package into a fresh private directory, starts

    python3 -I -c 'import sys; sys.path.insert(0, sys.argv[1]); from kiln.program import main; main()' <dir>

in its own process group with the reduced environment, fd 0 on /dev/null,
pipes on fd 1 and 2 and one end of a socketpair on fd 3, and plays the host
over that socket: sends boot, waits for boot-ack, sends run, answers calls.
"""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

from kiln import jsonplain

KILN_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "kiln")
LAUNCHER = "import sys; sys.path.insert(0, sys.argv[1]); from kiln.program import main; main()"
PYTHON = os.environ.get("KILN_TEST_PYTHON", sys.executable)

#: Generous: the machines these tests run on may be loaded.
TIMEOUT = float(os.environ.get("KILN_TEST_TIMEOUT", "120"))

NAMESPACES = [
    {"global": "tools", "names": ["search", "fail"], "errorClass": {"name": "ToolError", "memberNameProperty": "member"}},
    {"global": "db", "names": ["get"]},
]


def boot_frame(**overrides):
    frame = {
        "type": "boot",
        "cpuSeconds": 30,
        "addressSpaceBytes": 1 << 30,
        "maxLogBytes": 65536,
        "maxValueBytes": 32768,
        "namespaces": NAMESPACES,
    }
    frame.update(overrides)
    return frame


def default_answer(call):
    """Echo the args back; tools.fail and args {"reject": message} are rejected."""
    args = call.get("args")
    if call.get("name") == "fail" or (type(args) is dict and "reject" in args):
        message = args.get("reject", "it failed") if type(args) is dict else "it failed"
        return {"type": "reply", "id": call["id"], "ok": False, "message": message}
    return {"type": "reply", "id": call["id"], "ok": True, "value": {"echo": args}}


class Result:
    def __init__(self):
        self.frames = []  # every frame the child sent, decoded, in order
        self.raw = []  # the same, as the bytes of each line
        self.after_done = []  # lines that arrived after done
        self.returncode = None
        self.stdout = b""
        self.stderr = b""
        self.started = None
        self.acked = None  # seconds from spawn to boot-ack
        self.finished = None  # seconds from spawn to done
        self.ran = None  # seconds from spawn to sending run

    @property
    def done(self):
        for f in self.frames:
            if f.get("type") == "done":
                return f
        return None

    @property
    def done_raw(self):
        for f, raw in zip(self.frames, self.raw):
            if f.get("type") == "done":
                return raw
        return None

    @property
    def logs(self):
        return [f for f in self.frames if f.get("type") == "log"]

    @property
    def calls(self):
        return [f for f in self.frames if f.get("type") == "call"]

    def log_texts(self):
        return [f["text"] for f in self.logs]


class Host:
    def __init__(self, answer=default_answer, preexec=None, python=PYTHON):
        self.answer = answer
        self.dir = tempfile.mkdtemp(prefix="kiln-test-")
        os.chmod(self.dir, 0o700)
        os.mkdir(os.path.join(self.dir, "kiln"), 0o700)
        for name in os.listdir(KILN_DIR):
            if name.endswith(".py"):
                shutil.copy(os.path.join(KILN_DIR, name), os.path.join(self.dir, "kiln", name))
        self.sock, child = socket.socketpair()
        child_fd = child.fileno()

        def setup():
            os.dup2(child_fd, 3)  # dup2 leaves fd 3 inheritable; everything else Python opened is CLOEXEC
            if preexec is not None:
                preexec()

        self.result = Result()
        self.result.started = time.monotonic()
        self.proc = subprocess.Popen(
            [python, "-I", "-c", LAUNCHER, self.dir],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            close_fds=False,
            preexec_fn=setup,
            start_new_session=True,
            cwd=self.dir,
            env={"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": self.dir, "TMPDIR": self.dir},
        )
        child.close()
        self.sock.settimeout(TIMEOUT)
        self.reader = self.sock.makefile("rb")
        self._out = threading.Thread(target=self._drain, args=(self.proc.stdout, "stdout"), daemon=True)
        self._err = threading.Thread(target=self._drain, args=(self.proc.stderr, "stderr"), daemon=True)
        self._out.start()
        self._err.start()

    def _drain(self, pipe, name):
        data = pipe.read()
        setattr(self.result, name, data)

    def send(self, frame):
        self.sock.sendall((json.dumps(frame, separators=(",", ":")) + "\n").encode("utf-8"))

    def send_raw(self, data):
        self.sock.sendall(data)

    def read(self):
        """The next frame (decoded), or None at EOF."""
        line = self.reader.readline()
        if not line:
            return None
        assert line.endswith(b"\n"), line
        frame = jsonplain.loads_bytes(line)  # frames may nest deeper than json.loads goes
        self.result.frames.append(frame)
        self.result.raw.append(line[:-1])
        return frame

    def boot(self, **overrides):
        self.send(boot_frame(**overrides))
        frame = self.read()
        self.result.acked = time.monotonic() - self.result.started
        return frame

    def run(self, program):
        """Send run, answer calls until done or EOF; then wait for the exit."""
        self.result.ran = time.monotonic() - self.result.started
        self.send({"type": "run", "program": program})
        while True:
            frame = self.read()
            if frame is None:
                break
            if frame.get("type") == "call" and self.answer is not None:
                reply = self.answer(frame)
                if reply is not None:
                    self.send(reply)
            if frame.get("type") == "done":
                self.result.finished = time.monotonic() - self.result.started
                break
        return self.finish()

    def finish(self):
        # anything after done?
        if self.result.done is not None:
            rest = self.reader.read()
            if rest:
                self.result.after_done = rest.split(b"\n")
        try:
            self.result.returncode = self.proc.wait(TIMEOUT)
        except subprocess.TimeoutExpired:
            self.kill()
            self.result.returncode = self.proc.wait()
        self._out.join(TIMEOUT)
        self._err.join(TIMEOUT)
        for pipe in (self.proc.stdout, self.proc.stderr):
            pipe.close()
        self.close()
        return self.result

    def kill(self):
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def close(self):
        try:
            self.reader.close()
            self.sock.close()
        except OSError:
            pass
        shutil.rmtree(self.dir, ignore_errors=True)


def run(program, answer=default_answer, preexec=None, python=PYTHON, **boot):
    """Boot a child, run program, return the Result."""
    host = Host(answer=answer, preexec=preexec, python=python)
    try:
        ack = host.boot(**boot)
        if ack is None or ack.get("type") != "boot-ack":
            return host.finish()
        return host.run(program)
    except BaseException:
        host.kill()
        host.finish()
        raise
