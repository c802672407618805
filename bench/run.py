#!/usr/bin/python3
"""Measure kiln's round trips beside Jupyter's, in one run, on this machine.

Every figure is p50, p99 and CPU per operation, never a median alone:

- cell: N trivial durable cells through one ``kiln exec --json --data D``, the gap
  between successive cells, each stamping the monotonic clock as it runs;
- host request: N ``await runtime.inspect()`` from cells (125 a cell, under the cap of
  128), each timed in the cell;
- Jupyter: N trivial cells through jupyter_client and ipykernel, and N ``input()``
  answered over the stdin channel (Jupyter's host request);
- cold run: ``kiln run`` of ``return 1`` against a bare ``python3 -I -c pass``;
- floor: N round trips of 144 bytes (an execute frame's size) between two python
  processes over a Unix socket, doing nothing else: what any exchange between two
  processes costs on this machine, before either does any work.

CPU per operation is user+sys of every process involved (kiln and its workers, read
with getrusage(RUSAGE_CHILDREN) once they are reaped), less the same run with one
operation, divided by the operations between: start-up is not charged to them. kiln's
figures also give its voluntary context switches per operation, counted the same way:
each is a thread that slept and had to be woken, which on a busy machine may wait for a
CPU, and the count holds steady where timings do not.

``--load`` runs every measurement again with two busy-loop processes on the CPUs.
``--cpu N`` holds every measured process (kiln and its workers, the Jupyter client and
kernel, the cold runs) to CPU N; the busy loops stay free. It shows what the round trips
cost when no wakeup has to cross to another, idle, CPU.

    /usr/bin/python3 bench/run.py --kiln ./kiln [--n 1000] [--load] [--cpu N]

The Jupyter anchor needs python3-jupyter-client and python3-ipykernel (Debian), run by
/usr/bin/python3; without them it is skipped and says so.
"""
import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time


def children_cpu():
    """User+sys seconds of every reaped child (and their reaped children)."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def children_switches():
    """Voluntary context switches of every reaped child (and their reaped children)."""
    return resource.getrusage(resource.RUSAGE_CHILDREN).ru_nvcsw


def self_cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def pct(samples, p):
    s = sorted(samples)
    return s[min(len(s) - 1, int(len(s) * p / 100))]


def figures(samples_us, cpu_us, switches=None):
    out = {"p50_us": round(pct(samples_us, 50), 1), "p99_us": round(pct(samples_us, 99), 1),
           "cpu_us": round(cpu_us, 1)}
    if switches is not None:
        out["switches"] = round(switches, 2)
    return out


def python_env(python):
    """The environment in which kiln's "python3" is python: a directory holding a link to
    it, first on PATH."""
    link_dir = os.path.join(tempfile.gettempdir(), f"kiln-bench-python-{os.getuid()}")
    os.makedirs(link_dir, exist_ok=True)
    link = os.path.join(link_dir, "python3")
    if not os.path.islink(link) or os.readlink(link) != python:
        tmp = link + f".{os.getpid()}"
        os.symlink(python, tmp)
        os.replace(tmp, link)
    return dict(os.environ, PATH=link_dir + os.pathsep + os.environ.get("PATH", ""))


def kiln_exec(kiln, python, cells):
    """Run cells in one durable kiln exec; return its records, and the CPU (s) and
    voluntary context switches of kiln and its workers."""
    with tempfile.TemporaryDirectory(prefix="kiln-bench-") as data:
        before, switches = children_cpu(), children_switches()
        p = subprocess.run([kiln, "exec", "--json", "--data", data, *cells], env=python_env(python),
                           stdout=subprocess.PIPE, stdin=subprocess.DEVNULL)
        cpu, switches = children_cpu() - before, children_switches() - switches
    lines = p.stdout.splitlines()
    if p.returncode != 0:
        sys.exit(f"kiln exec failed ({p.returncode}): {lines[-1:]!r}")
    return [json.loads(line) for line in lines], cpu, switches


# A trivial cell whose result is the moment it ran (CLOCK_MONOTONIC, shared by every
# process): the gap between two is one whole round trip, from one cell's code through
# its record, durable, to the next cell's code, whatever the pace of this reader.
STAMP_CELL = "perf_counter_ns()"


def bench_cells(kiln, python, n):
    head = "from time import perf_counter_ns"
    recs, cpu_n, switches_n = kiln_exec(kiln, python, [head] + [STAMP_CELL] * n)
    _, cpu_1, switches_1 = kiln_exec(kiln, python, [head, STAMP_CELL])
    stamps = [int(r["output"][0]["text"]) for r in recs[1:]]
    gaps = [(b - a) / 1000 for a, b in zip(stamps, stamps[1:])]
    return figures(gaps, (cpu_n - cpu_1) * 1e6 / (n - 1), (switches_n - switches_1) / (n - 1))


REQUESTS_CELL = """import time
ts = []
for _ in range({n}):
    t0 = time.perf_counter_ns()
    await runtime.inspect()
    ts.append(time.perf_counter_ns() - t0)
" ".join(map(str, ts))"""


def bench_requests(kiln, python, n):
    # A cell may make at most 128 host requests: n of them are spread over cells of 125.
    cells = [REQUESTS_CELL.format(n=min(125, n - i)) for i in range(0, n, 125)]
    recs, cpu_n, switches_n = kiln_exec(kiln, python, cells)
    _, cpu_1, switches_1 = kiln_exec(kiln, python, [REQUESTS_CELL.format(n=1)])
    samples = []
    for rec in recs:
        if rec["status"] != "ok":
            sys.exit(f"a request cell failed: {rec}")
        samples += [int(x) / 1000 for x in rec["output"][-1]["text"].strip("'").split()]
    return figures(samples, (cpu_n - cpu_1) * 1e6 / (n - 1), (switches_n - switches_1) / (n - 1))


def proc_cpu(pid):
    """User+sys seconds of a live process, from /proc."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def jupyter(n):
    """Trivial cells and input() round trips through jupyter_client and ipykernel."""
    try:
        from jupyter_client.manager import start_new_kernel
    except ImportError:
        return None
    os.environ.setdefault("PYDEVD_DISABLE_FILE_VALIDATION", "1")  # the kernel's debugger, quiet
    km, kc = start_new_kernel(kernel_name="python3")
    try:
        pid = km.provisioner.process.pid
        for _ in range(20):  # warm up
            kc.execute_interactive("1+1", timeout=30, output_hook=lambda m: None)
        samples = []
        cpu0 = self_cpu() + proc_cpu(pid)
        for _ in range(n):
            t0 = time.perf_counter_ns()
            kc.execute_interactive("1+1", timeout=30, output_hook=lambda m: None)
            samples.append((time.perf_counter_ns() - t0) / 1000)
        cells = figures(samples, (self_cpu() + proc_cpu(pid) - cpu0) * 1e6 / n)

        code = ("import time\nts = []\nfor _ in range(%d):\n    t0 = time.perf_counter_ns()\n"
                "    input()\n    ts.append(time.perf_counter_ns() - t0)\n"
                "print(' '.join(map(str, ts)))" % n)
        out = []
        cpu0 = self_cpu() + proc_cpu(pid)
        kc.execute_interactive(code, timeout=120, allow_stdin=True,
                               stdin_hook=lambda m: kc.input("x"),
                               output_hook=lambda m: out.append(m["content"].get("text", "")))
        cpu = (self_cpu() + proc_cpu(pid) - cpu0) * 1e6 / n
        samples = [int(x) / 1000 for x in "".join(out).split()]
        return {"cell": cells, "request": figures(samples, cpu)}
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


def cold(kiln, python, rounds=20):
    """Cold kiln run of `return 1` against python3 -I -c pass, each p50 and p99 in µs,
    alternating."""
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write("return 1\n")
    try:
        runs = {"kiln run": [kiln, "run", f.name], "python3 -I -c pass": [python, "-I", "-c", "pass"]}
        times = {k: [] for k in runs}
        cpus = {k: [] for k in runs}
        for _ in range(rounds):
            for name, argv in runs.items():
                c0, t0 = children_cpu(), time.perf_counter_ns()
                subprocess.run(argv, stdout=subprocess.DEVNULL, check=True, env=python_env(python))
                times[name].append((time.perf_counter_ns() - t0) / 1000)
                cpus[name].append((children_cpu() - c0) * 1e6)
        return {k: figures(times[k], statistics.median(cpus[k])) for k in runs}
    finally:
        os.unlink(f.name)


def floor(python, n):
    """Round trips of a 144-byte message between two processes over a Unix socket, each
    timed by the side that sends it; CPU is both processes'."""
    code = """import os, resource, socket, sys, time
n = int(sys.argv[1])
a, b = socket.socketpair()
pid = os.fork()
if pid == 0:
    a.close()
    while data := b.recv(65536):
        b.sendall(data)
    os._exit(0)
b.close()
msg, ts = bytes(144), []
r0 = resource.getrusage(resource.RUSAGE_SELF)
for _ in range(n):
    t0 = time.perf_counter_ns()
    a.sendall(msg)
    got = 0
    while got < len(msg):
        got += len(a.recv(65536))
    ts.append(time.perf_counter_ns() - t0)
a.close()
os.waitpid(pid, 0)
r1, rc = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
cpu = r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime + rc.ru_utime + rc.ru_stime
print(cpu, " ".join(map(str, ts)))
"""
    out = subprocess.run([python, "-I", "-c", code, str(n)], stdout=subprocess.PIPE, check=True, text=True).stdout
    cpu, *samples = out.split()
    return figures([int(x) / 1000 for x in samples], float(cpu) * 1e6 / n)


def busy_loops():
    return [subprocess.Popen(["sh", "-c", "while :; do :; done"]) for _ in range(2)]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kiln", default="kiln", help="the kiln binary")
    ap.add_argument("--python", default="/usr/bin/python3", help="the interpreter kiln and Jupyter run")
    ap.add_argument("--n", type=int, default=1000, help="operations per measurement")
    ap.add_argument("--load", action="store_true", help="also measure with two busy-loop processes")
    ap.add_argument("--only", default="cells,requests,jupyter,cold,floor", help="comma-separated measurements")
    ap.add_argument("--label", default="", help="a label printed with each line")
    ap.add_argument("--cpu", type=int, help="hold the measured processes to this CPU")
    args = ap.parse_args()
    only = set(args.only.split(","))
    modes = ["quiet"] + (["load"] if args.load else [])
    for mode in modes:
        loops = busy_loops() if mode == "load" else []
        free = os.sched_getaffinity(0)
        if args.cpu is not None:  # after the loops start: they stay free
            os.sched_setaffinity(0, {args.cpu})
        try:
            out = {"label": args.label, "mode": mode, "cpu": args.cpu}
            if "cells" in only:
                out["kiln_cell"] = bench_cells(args.kiln, args.python, args.n)
            if "requests" in only:
                out["kiln_request"] = bench_requests(args.kiln, args.python, args.n)
            if "jupyter" in only:
                j = jupyter(args.n)
                out["jupyter"] = j if j is not None else "skipped: no jupyter_client for " + sys.executable
            if "floor" in only:
                out["floor"] = floor(args.python, args.n)
            if "cold" in only and mode == "quiet":
                out["cold"] = cold(args.kiln, args.python)
            print(json.dumps(out), flush=True)
        finally:
            os.sched_setaffinity(0, free)
            for p in loops:
                p.kill()
                p.wait()


if __name__ == "__main__":
    main()
