#!/usr/bin/env bash
# What counting every member request costs: one build run side by side with itself, members'
# I/O counted (as always) and not counted (RAIDKIT_MEMBER_COUNTERS=off), through
# scripts/compare/timing.sh (`raidkit bench nbd`, `raidkit bench rebuild`, seqbench, the two
# taking turns round by round, medians). Its `new/old` column is counted over uncounted: below
# 1 for a rate is what counting costs. TOLERANCE=0.02 marks figures beyond 2 %.
#   scripts/compare/counters.sh TARGET_DIR [ROUNDS] [OUT_DIR]
# TARGET_DIR as for timing.sh: a cargo `target/release` holding `raidkit` and
# `examples/seqbench`.
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: $0 TARGET_DIR [ROUNDS] [OUT_DIR]" >&2; exit 2; }
DIR=$(cd "$1" && pwd) ROUNDS=${2:-5}
OUT=${3:-$(mktemp -d /tmp/raidkit-counters.XXXXXX)}
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d /tmp/raidkit-counters-builds.XXXXXX)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/counted/examples" "$work/uncounted/examples"
ln -s "$DIR/raidkit" "$work/counted/raidkit"
ln -s "$DIR/examples/seqbench" "$work/counted/examples/seqbench"
for b in raidkit examples/seqbench; do
  # The setting reaches every process the bench starts (`raidkit serve` too).
  printf '#!/bin/sh\nRAIDKIT_MEMBER_COUNTERS=off exec %q "$@"\n' "$DIR/$b" > "$work/uncounted/$b"
  chmod +x "$work/uncounted/$b"
done
TOLERANCE=${TOLERANCE:-0.02} "$here/timing.sh" "$work/uncounted" "$work/counted" "$ROUNDS" "$OUT"
