#!/usr/bin/env bash
# Background initialisation on emulated hard disks: a RAID 6 over 6 drives is created with
# `--init background` (md's initial resync), served at once, read by a client in its first
# seconds, and then left idle while the resync builds P and Q behind the data. Prints the
# client's first reads (time to the first one after the server started, and its rate while
# the resync runs), the resync's rate idle in md's terms (each member's data passed per
# second, as /proc/mdstat's speed) against one drive's whole-surface sequential read rate,
# and the ratio.
#   scripts/bench/init-disks.sh [DRIVE] [SIZE] [CHUNK] [fresh|used]
#     (defaults hds72101 2G 512K used)
# fresh: members read as zeroes (new drives): the resync only reads. used: members hold old
# data (random bytes written into their images first), so most stripes' P and Q are wrong and
# the resync rewrites them, as on drives that held something before.
# Member images go to $INIT_DIR (default /var/tmp/raidkit-init); put them in memory
# (/dev/shm/...) so the emulated drives, not the image files, set the pace. The drives run
# in real time: a few minutes.
set -euo pipefail
DRIVE=${1:-hds72101} SIZE=${2:-2G} CHUNK=${3:-512K} MEMBERS=${4:-used}
R=${RAIDKIT:-target/release/raidkit}
D=${INIT_DIR:-/var/tmp/raidkit-init}
[ -x "$R" ] || { echo "build first: cargo build --release -p raidkit-cli" >&2; exit 2; }
command -v nbdinfo >/dev/null || { echo "needs libnbd-bin" >&2; exit 2; }
mkdir -p "$D"; rm -f "$D"/e*.img "$D"/nbd.sock*
SRV=""
trap '[ -n "$SRV" ] && kill "$SRV" 2>/dev/null; wait 2>/dev/null; rm -f "$D"/e*.img' EXIT
m() { echo "emu:$DRIVE:$SIZE:$D/e$1.img"; }
ctl="$D/nbd.sock.ctl"
uri="nbd+unix:///md0?socket=$D/nbd.sock"
mb_s() { python3 -c 'import json,sys; print(json.load(sys.stdin)["workloads"][0]["mb_s"]["median"])'; }
echo "one $DRIVE drive of $SIZE, whole surface, 4 MiB requests:"
READ=$("$R" bench run --workload seq-read --bs 4m --qd 1 --size "$SIZE" --json "emu:$DRIVE:$SIZE" | mb_s)
echo "  sequential read $READ MB/s"
bytes=$(python3 -c "import sys; u={'K':1<<10,'M':1<<20,'G':1<<30}; s='$SIZE'; print(int(s[:-1])*u[s[-1]])")
if [ "$MEMBERS" = used ]; then
  echo "members hold old data: $((6 * bytes >> 20)) MiB of random bytes into their images"
  for i in 0 1 2 3 4 5; do
    head -c "$bytes" /dev/urandom > "$D/e$i.img"
  done
fi
"$R" create --level 6 --raid-devices 6 --chunk "$CHUNK" --consistency-policy resync --init background --force \
  "$(m 0)" "$(m 1)" "$(m 2)" "$(m 3)" "$(m 4)" "$(m 5)" 2>/dev/null | sed 's/^/  /'
start=$(date +%s.%N)
"$R" serve --socket "$D/nbd.sock" --name md0 "$(m 0)" "$(m 1)" "$(m 2)" "$(m 3)" "$(m 4)" "$(m 5)" 2> "$D/serve.log" &
SRV=$!
until nbdinfo --size "$uri" > /dev/null 2>&1; do sleep 0.05; done
first=$(date +%s.%N)
# The client's first seconds: 4 KiB random reads and 1 MiB sequential reads while the
# resync runs.
RAND=$("$R" bench run --workload custom --read-pct 100 --random-pct 100 --bs 4k --qd 4 --time 3 --warmup 0 --json "$uri" \
  | python3 -c 'import json,sys; w=json.load(sys.stdin)["workloads"][0]; print(w["iops"]["median"])')
SEQ=$("$R" bench run --workload seq-read --bs 1m --qd 4 --time 3 --warmup 0 --json "$uri" | mb_s)
detail() { "$R" detail --control "$ctl" --json; }
detail | python3 -c 'import json,sys; t=json.load(sys.stdin)["status"].get("task") or {}; print("  during the client reads: %s at %.0f%%" % (t.get("kind", "no task"), t.get("percent", 0)))'
# Idle from here: the resync's rate over its remaining run, sampled every second.
t0=$(date +%s.%N); p0=$(detail | python3 -c 'import json,sys; t=json.load(sys.stdin)["status"].get("task") or {}; print(t.get("position_sectors",0))')
last=$p0; tl=$t0
while :; do
  out=$(detail | python3 -c 'import json,sys; t=json.load(sys.stdin)["status"].get("task"); print(t["position_sectors"] if t and t["kind"]=="resync" else "done")')
  [ "$out" = done ] && break
  last=$out; tl=$(date +%s.%N)
  sleep 1
done
end=$(date +%s.%N)
python3 - "$READ" "$start" "$first" "$end" "$t0" "$p0" "$tl" "$last" "$RAND" "$SEQ" "$bytes" <<'PY'
import sys
read, start, first, end, t0, p0, tl, last, rand, seq, size = map(float, sys.argv[1:])
print(f"first client read possible {first - start:.2f} s after the server started; "
      f"in its first seconds: 4 KiB random reads {rand:.0f} IOPS at qd 4, "
      f"1 MiB sequential reads {seq:.1f} MB/s")
idle = (last - p0) * 512 / max(tl - t0, 1e-9) / 1e6
print(f"resync idle: {idle:.1f} MB/s per member (md's mdstat speed), sampled over {tl - t0:.0f} s; "
      f"one drive reads {read:.1f} MB/s over its whole surface: {idle / read:.2f}x")
print(f"whole initialisation of {size / 2**30:.0f} GiB per member: {end - start:.1f} s "
      f"({size / (end - start) / 1e6:.1f} MB/s per member, client reads included)")
PY
grep -E "resync" "$D/serve.log" | tail -2 | sed 's/^/  /'
