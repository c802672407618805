#!/bin/sh
# peak-rss.sh measures the peak RSS of `kiln run` while it parses one forged call frame
# of each worst shape, the frame as large as the frame cap allows.
#
#   internal/program/testdata/peak-rss.sh [BYTES] [kiln run flags…]
#
# BYTES is the size of the args to forge (default: 1 MiB); the flags go to kiln run
# (e.g. --max-value-bytes 20971520 --memory 1GiB). It prints one line per shape: the
# shape, the frame's bytes, kiln's peak RSS (GNU time's %M, in kB), the run's status
# and its wall time.
set -eu
bytes=${1:-1048576}
[ $# -gt 0 ] && shift
here=$(cd "$(dirname "$0")/../../.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd "$here" && go build -o "$tmp/kiln" ./cmd/kiln)
for shape in deep-arrays wide-numbers tiny-strings deep-objects; do
	cat >"$tmp/p.py" <<PY
import os, select
n = $bytes
shape = "$shape"
if shape == "deep-arrays":
    args = b"[" * (n // 2) + b"]" * (n // 2)
elif shape == "wide-numbers":
    args = b"[" + b"1," * (n // 2 - 1) + b"1]"
elif shape == "tiny-strings":
    args = b"[" + b'"",' * (n // 3 - 1) + b'""]'
else:
    args = b'{"":' * (n // 5) + b"1" + b"}" * (n // 5)
frame = b'{"type":"call","id":0,"global":"kiln","name":"list_dir","args":' + args + b"}\n"
view = memoryview(frame)
while view:
    try:
        view = view[os.write(3, view):]
    except BlockingIOError:
        select.select([], [3], [])
return len(frame)
PY
	out=$(cd "$tmp" && /usr/bin/time -f '%M %e' ./kiln run --json "$@" p.py 2>"$tmp/time" || true)
	status=$(printf '%s' "$out" | sed -n 's/.*"status":"\([a-z-]*\)".*/\1/p')
	printf '%-13s %10d bytes  peak RSS %8s kB  wall %6ss  %s\n' "$shape" "$bytes" \
		"$(tail -1 "$tmp/time" | cut -d' ' -f1)" "$(tail -1 "$tmp/time" | cut -d' ' -f2)" "$status"
done
