#!/usr/bin/env bash
# Reshape speed on emulated hard disks: a RAID 5 over 4 members grows to 5 (`raidkit grow
# --raid-devices 5`), against the least time the members' own sequential transfers allow for
# the bytes it moves: each member reads what the reshape read from it and writes what it
# wrote, at the drive's whole-surface sequential read and write rates (measured first, on
# one drive of the same model and size), one after the other. Prints both and the ratio.
#   scripts/bench/reshape-disks.sh [DRIVE] [SIZE] [CHUNK]     (defaults hds72101 4G 512K)
# Member images go to $RESHAPE_DIR (default /var/tmp/raidkit-reshape; 5 x SIZE of space once
# written). Put them in memory (RESHAPE_DIR=/dev/shm/...) where it has room: on a slow disk
# the image files, not the emulated drives, set the pace. Takes a few minutes: the drives run
# in real time. Compare builds side by side with RAIDKIT=path/to/raidkit, alternating runs.
# Also prints the rate in md's /proc/mdstat terms beside md's rates users published.
set -euo pipefail
DRIVE=${1:-hds72101} SIZE=${2:-4G} CHUNK=${3:-512K}
R=${RAIDKIT:-target/release/raidkit}
D=${RESHAPE_DIR:-/var/tmp/raidkit-reshape}
[ -x "$R" ] || { echo "build first: cargo build --release -p raidkit-cli" >&2; exit 2; }
mkdir -p "$D"; rm -f "$D"/e*.img
trap 'rm -f "$D"/e*.img' EXIT
m() { echo "emu:$DRIVE:$SIZE:$D/e$1.img"; }
rate() { # workload -> MB/s (median), whole surface, 4 MiB requests
  "$R" bench run --workload "$1" --allow-writes --bs 4m --qd 1 --size "$SIZE" --json "emu:$DRIVE:$SIZE" \
    | python3 -c 'import json,sys; print(json.load(sys.stdin)["workloads"][0]["mb_s"]["median"])'
}
echo "one $DRIVE drive of $SIZE, whole surface, 4 MiB requests:"
READ=$(rate seq-read); WRITE=$(rate seq-write)
echo "  sequential read $READ MB/s, write $WRITE MB/s"
echo "RAID 5 over 4 members, chunk $CHUNK (new drives: nothing to initialise)"
"$R" create --level 5 --raid-devices 4 --chunk "$CHUNK" --consistency-policy resync \
  "$(m 0)" "$(m 1)" "$(m 2)" "$(m 3)" > /dev/null 2>&1
"$R" add --member "$(m 4)" "$(m 0)" "$(m 1)" "$(m 2)" "$(m 3)" > /dev/null
start=$(date +%s.%N)
"$R" grow --raid-devices 5 --json "$(m 0)" "$(m 1)" "$(m 2)" "$(m 3)" "$(m 4)" > "$D/report.json"
end=$(date +%s.%N)
python3 - "$D/report.json" "$start" "$end" "$READ" "$WRITE" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
secs = float(sys.argv[3]) - float(sys.argv[2])
read, write = float(sys.argv[4]) * 1e6, float(sys.argv[5]) * 1e6
# Per member: the old members share the reads, every member takes an equal share of writes.
per_read = r["read_bytes"] / r["old_raid_devices"]
per_write = r["written_bytes"] / r["new_raid_devices"]
bound = per_read / read + per_write / write
print(f"reshape {r['old_raid_devices']} -> {r['new_raid_devices']}: {r['old_array_bytes']/2**20:.0f} MiB -> "
      f"{r['new_array_bytes']/2**20:.0f} MiB in {secs:.1f} s; per member {per_read/2**20:.0f} MiB read, "
      f"{per_write/2**20:.0f} MiB written; {r['checkpoints']} checkpoints")
print(f"least time the members' sequential rates allow: {bound:.1f} s; ratio {bound/secs:.2f}x")
# md's /proc/mdstat speed: each member's share of the old layout passed per second.
old_data = r["old_raid_devices"] - 1
md_speed = r["old_array_bytes"] / old_data / secs / 1e6
print(f"in md's terms (mdstat speed, each member's data passed per second): {md_speed:.1f} MB/s")
print("md's published reshape rates, in the same terms (users' reports, other drives and hosts):")
print("  27.5 MB/s: RAID 5 of 4 WD Red 3 TB to RAID 0 (run as a 5-member RAID 5), backup file,")
print("             Raspberry Pi CM4 NAS (engbedded.com, 2021, mdstat speed=27468K/sec)")
print("  ~55 MB/s:  RAID 6 grown to 11 members, after raising speed_limit_max and")
print("             stripe_cache_size (baptiste-wicht.com, 2015, average over 13 hours)")
EOF
