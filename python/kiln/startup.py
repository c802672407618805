"""What every kiln worker process does as it starts: read its options, take the startup
token from stdin, seal stdin, and, when something is wrong, say why on the real stderr
and end at once."""
import _socket
import os
import sys

from kiln import wire

EXIT_FAILURE = 2  # the exit status of a worker that cannot go on


def diagnose(who, text):
    """Write one diagnostic line, from who ("worker", "hooks"), to the real stderr, which
    the host keeps a tail of."""
    line = " ".join(text.splitlines())
    os.write(2, f"kiln {who}: {line}\n".encode("utf-8", "replace"))


def fail(who, reason):
    """Say why and end the process at once."""
    diagnose(who, reason)
    os._exit(EXIT_FAILURE)


def parse_options(who, argv, required, optional, identifiers):
    """Return argv's ``--name value`` options; fail unless they are exactly the required
    ones plus any of the optional ones, each once, with identifiers where due."""
    options = dict(zip(argv[::2], argv[1::2]))
    given = sorted(name for name in options if name not in optional)
    if len(argv) != 2 * len(options) or given != sorted(required):
        usage = " ".join([f"{name} VALUE" for name in required] + [f"[{name} VALUE]" for name in optional])
        fail(who, f"usage: {usage} (got {argv!r})")
    for name in identifiers:
        if not wire.valid_identifier(options[name]):
            fail(who, f"{name} {options[name]!r} is not an identifier")
    return options


def handed(who, options, name):
    """What the host handed over as option name: a file's path (name PATH) or, with
    name-fd N, a pipe's descriptor, an int; None when it gave neither."""
    if name + "-fd" not in options:
        return options.get(name)
    text = options[name + "-fd"]
    if not text.isdigit() or int(text) < 3:
        fail(who, f"{name}-fd {text!r} is not a descriptor past the standard streams")
    return int(text)


def connect(who, options):
    """The socket to the host: the descriptor handed as --socket-fd, or a connection to
    the path given as --socket. Exactly one of them is expected; anything else, or a path
    that cannot be reached, ends the process."""
    socket = handed(who, options, "--socket")
    if socket is None or "--socket" in options and "--socket-fd" in options:
        fail(who, f"one of --socket and --socket-fd expected (got {options!r})")
    if isinstance(socket, int):
        return _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM, fileno=socket)
    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        sock.connect(socket)
    except OSError as err:
        fail(who, f"cannot reach the host: {err}")
    return sock


def take(who, source, what):
    """Read what the host handed over at source (see handed): a file, removed once read,
    or a pipe, read to its end and closed. One that cannot be read ends the process."""
    try:
        if isinstance(source, int):
            chunks = []
            while chunk := os.read(source, 1 << 16):
                chunks.append(chunk)
            os.close(source)
            return b"".join(chunks)
        with open(source, "rb") as file:
            data = file.read()
        os.remove(source)
        return data
    except OSError as err:
        fail(who, f"cannot read the {what}: {err}")


def read_token(who):
    """Read the startup token, the first line on stdin."""
    data = b""
    while b"\n" not in data and len(data) <= wire.MAX_IDENTIFIER_LEN:
        chunk = os.read(0, 256)
        if not chunk:
            break
        data += chunk
    token = data.split(b"\n", 1)[0].strip().decode("ascii", "replace")
    if not wire.valid_identifier(token):
        fail(who, "no startup token on stdin")
    return token


def seal_stdin():
    """Point fd 0 and sys.stdin at /dev/null, so the code run reads nothing of the host's."""
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    sys.stdin = open(0, encoding="utf-8", closefd=False)


def limits(options):
    """Apply the --memory limit of options, and return its --cpu-seconds (None if not
    given); fail on a value that is not a positive integer."""
    values = {}
    for name in ("--memory", "--cpu-seconds"):
        if name in options:
            text = options[name]
            if not text.isdigit() or int(text) <= 0:
                fail("worker", f"{name} {text!r} is not a positive integer")
            values[name] = int(text)
    if "--memory" in values:
        from kiln.limits import limit_memory

        try:
            limit_memory(values["--memory"])
        except (OSError, ValueError) as err:
            fail("worker", f"cannot limit the memory: {err}")
    return values.get("--cpu-seconds")
