#!/usr/bin/env bash
# A reshape on a served array, on emulated hard disks: a RAID 5 over 4 members grows to 5
# (`raidkit grow --control --raid-devices 5`) while a client reads the array through NBD.
# Prints the client's sequential read rate idle and while the reshape runs (and their
# ratio), how long the online reshape took, and the least time the members' own sequential
# transfers allow for what it moved (as scripts/bench/reshape-disks.sh measures offline).
#   scripts/bench/online-reshape-disks.sh [DRIVE] [SIZE] [CHUNK]   (defaults hds72101 1G 64K)
# Member images go to $RESHAPE_DIR (default /var/tmp/raidkit-online); put them in memory
# (/dev/shm/...) so the emulated drives, not the image files, set the pace. The drives run
# in real time: a few minutes.
set -euo pipefail
DRIVE=${1:-hds72101} SIZE=${2:-1G} CHUNK=${3:-64K}
R=${RAIDKIT:-target/release/raidkit}
D=${RESHAPE_DIR:-/var/tmp/raidkit-online}
[ -x "$R" ] || { echo "build first: cargo build --release -p raidkit-cli" >&2; exit 2; }
command -v nbdinfo >/dev/null || { echo "needs libnbd-bin" >&2; exit 2; }
mkdir -p "$D"; rm -f "$D"/e*.img "$D"/nbd.sock*
SRV=""
trap '[ -n "$SRV" ] && kill "$SRV" 2>/dev/null; wait 2>/dev/null; rm -f "$D"/e*.img' EXIT
m() { echo "emu:$DRIVE:$SIZE:$D/e$1.img"; }
uri="nbd+unix:///md0?socket=$D/nbd.sock"
rate() { # MB/s of the client's sequential 1 MiB reads at queue depth 4 for $1 seconds
  "$R" bench run --workload seq-read --bs 1m --qd 4 --time "$1" --warmup 0 --json "$uri" \
    | python3 -c 'import json,sys; print(json.load(sys.stdin)["workloads"][0]["mb_s"]["median"])'
}
echo "RAID 5 over 4 $DRIVE drives of $SIZE, chunk $CHUNK, and a spare (new drives: nothing to initialise)"
"$R" create --level 5 --raid-devices 4 --chunk "$CHUNK" --consistency-policy resync \
  "$(m 0)" "$(m 1)" "$(m 2)" "$(m 3)" > /dev/null 2>&1
"$R" add --member "$(m 4)" "$(m 0)" "$(m 1)" "$(m 2)" "$(m 3)" > /dev/null
"$R" serve --socket "$D/nbd.sock" --name md0 "$(m 0)" "$(m 1)" "$(m 2)" "$(m 3)" "$(m 4)" 2> "$D/serve.log" &
SRV=$!
for _ in $(seq 200); do [ -S "$D/nbd.sock.ctl" ] && break; sleep 0.1; done
IDLE=$(rate 10)
echo "client sequential reads, array idle: $IDLE MB/s"
start=$(date +%s.%N)
"$R" grow --control "$D/nbd.sock.ctl" --raid-devices 5 > /dev/null
BUSY=$(rate 20)
while "$R" detail --control "$D/nbd.sock.ctl" --json | python3 -c 'import json,sys; sys.exit(0 if json.load(sys.stdin).get("reshape") else 1)'; do
  sleep 0.5
done
end=$(date +%s.%N)
echo "client sequential reads, reshape running: $BUSY MB/s"
python3 - "$IDLE" "$BUSY" "$start" "$end" "$SIZE" <<'PY'
import sys
idle, busy, start, end, size = float(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4]), sys.argv[5]
print(f"foreground while reshaping: {busy/idle:.2f}x of idle")
print(f"online reshape 4 -> 5 members took {end-start:.1f} s (with a client reading for the first 20 s)")
PY
grep -E "reshape-(started|finished)|online reshape" "$D/serve.log" | tail -2
