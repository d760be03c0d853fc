#!/usr/bin/env bash
# Write policies on emulated disks, the PERC6 report's other half in raidkit's terms: a RAID 5
# over 8 emulated Seagate Cheetah 15K.5 (the report's drives) with md's write journal, written
# through (the members have a write when it returns) and written back (the journal has it,
# the members get it later from the cache: the PERC6's WB, md's journal_mode write-back).
#   scripts/bench/write-policies.sh [JOURNAL] [SECONDS] [DRIVE] [SIZE] [CHUNK]
#     (defaults sf2281 60 cheetah15k5 1G 64K)
# JOURNAL: an emulated drive model from the catalog (sf2281: a SATA SSD), or "ram" for an
# image file in memory (what the PERC6's battery-backed cache is: memory that survives a
# power cut).
# Part 1: 4 KiB random writes at queue depths 1 and 8, SECONDS each (long enough that the
# cache fills and the figure is what the members sustain, not what the cache absorbs), the
# ratio write-back / write-through, and the members' load (requests per second, request size,
# utilisation) and the journal's.
# Part 2 (FULL=1): the twelve IOmeter access specifications at QD 8 with either policy, and
# which wins. Member images go to $WP_DIR (default /var/tmp/raidkit-wp); put them in memory
# (/dev/shm/...) so the emulated drives, not the image files, set the pace.
set -euo pipefail
JOURNAL=${1:-sf2281} SECS=${2:-60} DRIVE=${3:-cheetah15k5} SIZE=${4:-1G} CHUNK=${5:-64K}
R=${RAIDKIT:-target/release/raidkit}
D=${WP_DIR:-/var/tmp/raidkit-wp}
[ -x "$R" ] || { echo "build first: cargo build --release -p raidkit-cli" >&2; exit 2; }
mkdir -p "$D"; rm -f "$D"/e*.img "$D"/j.img "$D"/*.json
trap 'rm -f "$D"/e*.img "$D"/j.img' EXIT
members=()
for i in 0 1 2 3 4 5 6 7; do members+=("emu:$DRIVE:$SIZE:$D/e$i.img"); done
if [ "$JOURNAL" = ram ]; then
  journal="$D/j.img"
  "$R" create --level 5 --raid-devices 8 --chunk "$CHUNK" --init zero \
    --image-size "$SIZE" --write-journal "$journal" "${members[@]}" >/dev/null
else
  journal="emu:$JOURNAL:$SIZE:$D/j.img"
  "$R" create --level 5 --raid-devices 8 --chunk "$CHUNK" --init zero \
    --write-journal "$journal" "${members[@]}" >/dev/null
fi
all=("${members[@]}" "$journal")
run() { # NAME POLICY BENCH-ARGS...
  local name=$1 policy=$2; shift 2
  echo "  $name, write-$policy ..." >&2
  "$R" bench run --array --allow-writes --write-policy "$policy" --warmup 1 --json "$@" \
    "${all[@]}" > "$D/$name.$policy.json"
}
for qd in 1 8; do
  for p in through back; do
    run "randwrite-qd$qd" "$p" -w custom --bs 4k --read-pct 0 --random-pct 100 --qd "$qd" --time "$SECS"
  done
done
SPECS=""
if [ "${FULL:-0}" = 1 ]; then
  SPECS="web-file-server-4k web-file-server-8k web-file-server-64k dss media-streaming sql-server-log os-paging web-server-log db-oltp exchange-email os-drive video-on-demand"
  for spec in $SPECS; do
    for p in through back; do run "$spec" "$p" -w "$spec" --qd 8 --time 10; done
  done
fi
python3 - "$D" "$JOURNAL" $SPECS <<'PY'
import json, sys
d, journal, specs = sys.argv[1], sys.argv[2], sys.argv[3:]
def load(name, p):
    return json.load(open(f"{d}/{name}.{p}.json"))["workloads"][0]["runs"][0]
def load_line(run):
    ms = [m for m in run["members"] if "j.img" not in m["name"]]
    j = [m for m in run["members"] if "j.img" in m["name"]]
    per = lambda k: sum(m[k] for m in ms) / len(ms)
    s = f"members r/s {per('reads_per_s'):.0f} w/s {per('writes_per_s'):.0f} req {per('avg_req_kib'):.1f}K util {per('util_pct'):.0f}%"
    if j:
        s += f"; journal w/s {j[0]['writes_per_s']:.0f} util {j[0]['util_pct']:.0f}%"
    return s
print(f"journal: {journal}")
print(f"{'workload':22} {'through IOPS':>12} {'back IOPS':>10} {'ratio':>6}  p99 ms through/back   load through | back")
for name in ["randwrite-qd1", "randwrite-qd8"] + specs:
    t, b = load(name, "through"), load(name, "back")
    ratio = b["iops"] / t["iops"] if t["iops"] else 0.0
    p99 = lambda r: r.get("latency_us", {}).get("p99", 0) / 1000
    print(f"{name:22} {t['iops']:12.0f} {b['iops']:10.0f} {ratio:6.2f}  {p99(t):7.1f}/{p99(b):<7.1f}  {load_line(t)} | {load_line(b)}")
PY
