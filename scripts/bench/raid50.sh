#!/usr/bin/env bash
# RAID 50 on emulated hard disks, the Pegasus's and the PERC6's level: a RAID 50 of 6 drives in
# 2 spans (two RAID 5 of 3, a RAID 0 over them, as md stacks them). Prints one drive's
# sequential write rate over the part of its surface a member uses, the stack's sequential
# write rate against 4 drives' (the data drives of 6 with a parity drive per span), and its
# sequential read healthy and with one member of every span missing.
#   scripts/bench/raid50.sh [DRIVE] [SIZE] [CHUNK] [SECONDS] [POLICY]
#     (defaults hds72101 1G 512K 20 resync)
# POLICY is the spans' consistency policy: resync (what a controller's RAID 50 has) or ppl
# (RAID 5's default here and in md: a partial parity log write, on the parity member's log
# area, before every stripe write, which on a hard disk costs a seek per stripe).
# Member images go to $R50_DIR (default /var/tmp/raidkit-r50); put them in memory
# (/dev/shm/...) so the emulated drives, not the image files, set the pace.
set -euo pipefail
DRIVE=${1:-hds72101} SIZE=${2:-1G} CHUNK=${3:-512K} SECS=${4:-20} POLICY=${5:-resync}
R=${RAIDKIT:-target/release/raidkit}
D=${R50_DIR:-/var/tmp/raidkit-r50}
[ -x "$R" ] || { echo "build first: cargo build --release -p raidkit-cli" >&2; exit 2; }
mkdir -p "$D"; rm -f "$D"/e*.img "$D"/one.img
trap 'rm -f "$D"/e*.img "$D"/one.img' EXIT
mb_s() { python3 -c 'import json,sys; print(json.load(sys.stdin)["workloads"][0]["mb_s"]["median"])'; }
run() { "$R" bench run --warmup 1 --time "$SECS" --qd 4 --bs 1m --json "$@" | mb_s; }
ONE=$(run --allow-writes -w seq-write "emu:$DRIVE:$SIZE:$D/one.img")
echo "one $DRIVE ($SIZE): sequential write $ONE MB/s"
members=()
for i in 0 1 2 3 4 5; do members+=("emu:$DRIVE:$SIZE:$D/e$i.img"); done
"$R" create --level 50 --spans 2 --chunk "$CHUNK" --consistency-policy "$POLICY" --init zero \
  "${members[@]}" >/dev/null 2>&1
W=$(run --array --allow-writes -w seq-write "${members[@]}")
RD=$(run --array -w seq-read "${members[@]}")
# One member of each span left out (members 0-2 are span 0, 3-5 span 1).
DG=$(run --array -w seq-read "${members[1]}" "${members[2]}" "${members[4]}" "${members[5]}")
python3 - "$ONE" "$W" "$RD" "$DG" "$POLICY" <<'PY'
import sys
one, w, rd, dg = map(float, sys.argv[1:5])
print(f"RAID 50, 6 drives in 2 spans ({sys.argv[5]}): sequential write {w:.1f} MB/s = {w / (4 * one):.2f}x of 4 drives ({4 * one:.1f} MB/s)")
print(f"  sequential read healthy {rd:.1f} MB/s, one member lost per span {dg:.1f} MB/s = {dg / rd:.2f}x of healthy")
PY
