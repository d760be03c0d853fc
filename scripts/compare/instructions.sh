#!/usr/bin/env bash
# Instructions (valgrind --tool=callgrind, all threads) that builds of raidkit spend on the same
# work: create RAID L over 4 tmpfs members, `raidkit write` 48 MiB, `raidkit read` it back;
# for RAID 5 and 6 also `raidkit check`, and a rebuild (`raidkit add` of a new member after
# the last one was failed and removed).
# Instruction counts do not depend on what else the machine is doing, so builds compare
# where timing on a busy machine cannot.
#   scripts/compare/instructions.sh before=/path/to/old/raidkit now=target/release/raidkit
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: $0 NAME=RAIDKIT_BINARY..." >&2; exit 2; }
command -v valgrind >/dev/null || { echo "valgrind is missing: apt-get install valgrind" >&2; exit 1; }
D=$(mktemp -d /dev/shm/raidkit-instr.XXXXXX); trap 'rm -rf "$D"' EXIT
head -c $((48<<20)) /dev/urandom > "$D/src.bin"
M=("$D/m0.img" "$D/m1.img" "$D/m2.img" "$D/m3.img")
for L in 0 5 6; do
  for pair in "$@"; do
    name=${pair%%=*}; R=${pair#*=}
    rm -f "${M[@]}"
    "$R" create --level $L --raid-devices 4 --image-size 32M "${M[@]}" >/dev/null 2>&1
    ops=(write read); [ $L = 0 ] || ops+=(check rebuild)
    for op in "${ops[@]}"; do
      members=("${M[@]}")
      case $op in
        write) args=(write --input "$D/src.bin") ;;
        read) args=(read --length $((48<<20)) -o /dev/null) ;;
        check) args=(check --quiet) ;;
        rebuild)
          "$R" fail --member "${M[3]}" "${M[@]}" >/dev/null 2>&1
          "$R" remove --member "${M[3]}" "${M[@]}" >/dev/null 2>&1
          rm -f "$D/spare.img"; truncate -s 32M "$D/spare.img"
          args=(add --quiet --member "$D/spare.img"); members=("${M[@]:0:3}") ;;
      esac
      n=$(valgrind --tool=callgrind --callgrind-out-file=/dev/null "$R" "${args[@]}" "${members[@]}" 2>&1 >/dev/null \
          | grep -o "Collected : [0-9]*" | grep -o "[0-9]*")
      echo "RAID $L $op $name $n"
    done
  done
done
