#!/bin/sh
# peak-rss.sh measures the peak RSS of `kiln run` while it parses one forged call frame
# of each worst shape, the frame as large as the frame cap allows, and while its
# program forges 100 calls of kiln.read_file on a 16 MiB file and reads no reply.
#
#   internal/program/testdata/peak-rss.sh [BYTES] [kiln run flags…]
#
# BYTES is the size of the args to forge (default: 1 MiB); the flags go to kiln run
# (e.g. --max-value-bytes 20971520 --memory 1GiB). It prints one line per shape: the
# shape, the frame's bytes, kiln's peak RSS (its VmHWM, sampled every 10 ms), the wall
# time and the run's status.
set -eu
bytes=${1:-1048576}
[ $# -gt 0 ] && shift
here=$(cd "$(dirname "$0")/../../.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd "$here" && go build -o "$tmp/kiln" ./cmd/kiln)
# unread-replies: 100 forged calls of kiln.read_file on a 16 MiB file, replies unread.
python3 -c "open('$tmp/big.txt', 'w').write('x' * (16 << 20))"
for shape in deep-arrays wide-numbers tiny-strings deep-objects unread-replies; do
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
if shape == "unread-replies":
    frame = b"".join(b'{"type":"call","id":%d,"global":"kiln","name":"read_file","args":"big.txt"}\n' % i for i in range(100))
view = memoryview(frame)
while view:
    try:
        view = view[os.write(3, view):]
    except BlockingIOError:
        select.select([], [3], [])
if shape == "unread-replies":
    import time
    time.sleep(60)
return len(frame)
PY
	# kiln's own high-water mark (VmHWM), sampled until it exits: GNU time's %M would
	# be the larger of kiln and the python child it reaped.
	(cd "$tmp" && exec ./kiln run --json "$@" p.py >"$tmp/out" 2>/dev/null) &
	pid=$!
	start=$(date +%s.%N)
	hwm=0
	while kill -0 "$pid" 2>/dev/null; do
		h=$(sed -n 's/^VmHWM:[[:space:]]*\([0-9]*\) kB$/\1/p' "/proc/$pid/status" 2>/dev/null || true)
		[ -n "$h" ] && hwm=$h
		sleep 0.01
	done
	wait "$pid" || true
	end=$(date +%s.%N)
	status=$(sed -n 's/.*"status":"\([a-z-]*\)".*/\1/p' "$tmp/out")
	status="$status $(sed -n 's/.*"wall_ms":\([0-9]*\).*/(run wall \1ms)/p' "$tmp/out")"
	printf '%-13s %10d bytes  kiln peak RSS %8s kB  wall %6.2fs  %s\n' "$shape" "$bytes" "$hwm" \
		"$(echo "$end - $start" | bc)" "$status"
done
