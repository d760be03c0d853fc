#!/usr/bin/env bash
# Read policies on emulated disks, the PERC6 report's comparison in raidkit's terms: a RAID 5
# over 8 emulated Seagate Cheetah 15K.5 (the report's drives), each of the twelve IOmeter
# access specifications run with no read-ahead, read-ahead always and adaptive read-ahead
# (the PERC6's NORA, RA, ARA). Prints a table of IOPS and MB/s per workload and policy, which
# policy wins, and why from the members' load: the bytes the members read per byte the
# client read, and their average request size.
#   scripts/bench/read-policies.sh [DRIVE] [SIZE] [QD] [SECONDS] [CHUNK]
#     (defaults cheetah15k5 1G 8 8 64K)
# Member images go to $RA_DIR (default /var/tmp/raidkit-ra); put them in memory
# (/dev/shm/...) so the emulated drives, not the image files, set the pace. The drives run
# in real time: 12 workloads x 3 policies x (SECONDS + 1) seconds.
# Write-back versus write-through, the report's other half: scripts/bench/write-policies.sh.
set -euo pipefail
DRIVE=${1:-cheetah15k5} SIZE=${2:-1G} QD=${3:-8} SECS=${4:-8} CHUNK=${5:-64K}
R=${RAIDKIT:-target/release/raidkit}
D=${RA_DIR:-/var/tmp/raidkit-ra}
[ -x "$R" ] || { echo "build first: cargo build --release -p raidkit-cli" >&2; exit 2; }
mkdir -p "$D"; rm -f "$D"/e*.img "$D"/*.json
trap 'rm -f "$D"/e*.img' EXIT
members=()
for i in 0 1 2 3 4 5 6 7; do members+=("emu:$DRIVE:$SIZE:$D/e$i.img"); done
"$R" create --level 5 --raid-devices 8 --chunk "$CHUNK" --init zero "${members[@]}" >/dev/null
SPECS="web-file-server-4k web-file-server-8k web-file-server-64k dss media-streaming sql-server-log os-paging web-server-log db-oltp exchange-email os-drive video-on-demand"
for spec in $SPECS; do
  for p in none always adaptive; do
    echo "  $spec, read-ahead $p ..." >&2
    "$R" bench run --array --allow-writes --read-ahead "$p" -w "$spec" --qd "$QD" \
      --time "$SECS" --warmup 1 --json "${members[@]}" > "$D/$spec.$p.json"
  done
done
python3 - "$D" $SPECS <<'PY'
import json, sys
d, specs = sys.argv[1], sys.argv[2:]
pol = ["none", "always", "adaptive"]
print(f"{'workload':22} " + " ".join(f"{p+' IOPS':>14} {'MB/s':>7}" for p in pol) + "  best      members read per byte read, avg request KiB (none/always/adaptive)")
for s in specs:
    row, why, best = [], [], None
    for p in pol:
        run = json.load(open(f"{d}/{s}.{p}.json"))["workloads"][0]["runs"][0]
        iops, mbs = run["iops"], run["mb_s"]
        row.append(f"{iops:14.0f} {mbs:7.1f}")
        mem_read = sum(m["read_bytes"] for m in run["members"])
        amp = mem_read / run["read_bytes"] if run["read_bytes"] else 0.0
        reqs = [m["avg_req_kib"] for m in run["members"] if m["read_bytes"]]
        why.append(f"{amp:.2f}x/{(sum(reqs)/len(reqs) if reqs else 0):.0f}K")
        if best is None or iops > best[1]:
            best = (p, iops)
    print(f"{s:22} " + " ".join(row) + f"  {best[0]:9} " + " ".join(why))
PY
