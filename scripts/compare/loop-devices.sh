#!/usr/bin/env bash
# Builds of raidkit side by side on loop devices (the block-device path, O_DIRECT): RAID 5 over
# 4 loop devices backed by tmpfs files, `raidkit write` of 384 MiB and `raidkit read` of it,
# wall time and each device's I/O from /sys/block/loopN/stat. Rounds rotate the order.
# Needs root (losetup). The loop devices' contents are overwritten.
#   scripts/compare/loop-devices.sh before=/path/to/old/raidkit now=target/release/raidkit
# LEVEL (default 5) and CREATE_ARGS (extra `raidkit create` options, e.g. "--consistency-policy
# bitmap") pick the array; SIZE_MIB (default 384) what is written (RAID 1: at most 150).
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: $0 NAME=RAIDKIT_BINARY..." >&2; exit 2; }
MIB=${SIZE_MIB:-384} # MiB written and read
D=$(mktemp -d /dev/shm/raidkit-loop.XXXXXX)
DEVS=()
cleanup() { for d in "${DEVS[@]}"; do losetup -d "$d" 2>/dev/null || true; done; rm -rf "$D"; }
trap cleanup EXIT
head -c $((MIB<<20)) /dev/urandom > "$D/src.bin"
for i in 0 1 2 3; do
  fallocate -l 160M "$D/b$i.img"
  DEVS+=("$(losetup --find --show "$D/b$i.img")")
done
stat_sum() { # read and written sectors over all devices
  local r=0 w=0 f
  for d in "${DEVS[@]}"; do read -ra f < "/sys/block/$(basename "$d")/stat"; r=$((r+f[2])); w=$((w+f[6])); done
  echo "$r $w"
}
one() { # NAME BINARY
  local name=$1 R=$2 r0 w0 r1 w1 r2 w2 t0 t1 t2
  for d in "${DEVS[@]}"; do dd if=/dev/zero of="$d" bs=1M count=4 oflag=direct status=none; done
  "$R" create --level "${LEVEL:-5}" --raid-devices 4 --chunk 512K ${CREATE_ARGS:-} "${DEVS[@]}" >/dev/null 2>&1
  read -r r0 w0 < <(stat_sum); t0=$(date +%s.%N)
  "$R" write --input "$D/src.bin" "${DEVS[@]}" >/dev/null 2>&1
  read -r r1 w1 < <(stat_sum); t1=$(date +%s.%N)
  "$R" read --length $((MIB<<20)) -o /dev/null "${DEVS[@]}" 2>/dev/null
  read -r r2 w2 < <(stat_sum); t2=$(date +%s.%N)
  awk -v MIB="$MIB" -v v="$name" -v a="$t0" -v b="$t1" -v c="$t2" -v r0="$r0" -v r1="$r1" -v r2="$r2" -v w0="$w0" -v w1="$w1" -v w2="$w2" \
    'BEGIN{mb=MIB*1048576/1e6; printf "%-8s write %7.1f MB/s (members read %6.1f MiB, wrote %6.1f MiB) | read %7.1f MB/s (members read %6.1f MiB)\n", v, mb/(b-a), (r1-r0)/2048, (w1-w0)/2048, mb/(c-b), (r2-r1)/2048}'
}
pairs=("$@")
for round in 1 2 3 4 5; do
  for k in "${!pairs[@]}"; do
    p=${pairs[$(( (k + round) % ${#pairs[@]} ))]}
    echo -n "round $round "; one "${p%%=*}" "${p#*=}"
  done
done
