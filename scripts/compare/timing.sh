#!/usr/bin/env bash
# Timing of two builds of raidkit side by side, in one run: `raidkit bench nbd`, `raidkit bench
# rebuild` (RAID 5 and 6) and the engine's seqbench, the builds taking turns round by round
# (the order flips every round), each figure the median over rounds, then NEW / OLD. Each
# bench discards a warm-up run of its own.
#   scripts/compare/timing.sh OLD_TARGET_DIR NEW_TARGET_DIR [ROUNDS] [OUT_DIR]
# TOLERANCE (default 0.05) is how far new/old may stray from 1 before a figure is marked;
# SEQBENCH_ARGS (default 128) are seqbench's arguments (`128 - 3`: three rounds, not five).
# A target dir is a cargo `target/release` holding `raidkit` and `examples/seqbench`
# (cargo build --release -p raidkit-cli -p raidkit-engine --examples).
# Run it on an otherwise idle machine; under `chrt -r 1` where root, so other processes take
# less of each second (the benches inherit it).
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: $0 OLD_TARGET_DIR NEW_TARGET_DIR [ROUNDS] [OUT_DIR]" >&2; exit 2; }
OLD=$1 NEW=$2 ROUNDS=${3:-3}
OUT=${4:-$(mktemp -d /tmp/raidkit-timing.XXXXXX)}
mkdir -p "$OUT"
for d in "$OLD" "$NEW"; do
  [ -x "$d/raidkit" ] && [ -x "$d/examples/seqbench" ] || { echo "$d: no raidkit or examples/seqbench" >&2; exit 2; }
done
run_build() { # name dir round
  local name=$1 dir=$2 r=$3
  echo "round $r: $name" >&2
  "$dir/raidkit" bench nbd --runs 3 --runtime-s 2 --json > "$OUT/nbd.$name.$r.json"
  for L in 5 6; do
    "$dir/raidkit" bench rebuild --level $L --size 256M --runs 3 --json > "$OUT/rebuild$L.$name.$r.json"
  done
  # shellcheck disable=SC2086 # several arguments
  "$dir/examples/seqbench" ${SEQBENCH_ARGS:-128} > "$OUT/seq.$name.$r.txt"
}
for r in $(seq 1 "$ROUNDS"); do
  if [ $((r % 2)) = 1 ]; then run_build old "$OLD" "$r"; run_build new "$NEW" "$r"
  else run_build new "$NEW" "$r"; run_build old "$OLD" "$r"; fi
done
python3 - "$OUT" "$ROUNDS" "${TOLERANCE:-0.05}" <<'EOF'
import json, sys, statistics, re
out, rounds, tol = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
def rows(name, r):
    got = {}
    nbd = json.load(open(f"{out}/nbd.{name}.{r}.json"))
    for row in (nbd["rows"] if isinstance(nbd, dict) else nbd):
        got[f"nbd RAID {row['level']} {row['measurement']} ({row['unit']})"] = row["raidkit"]
    for L in (5, 6):
        doc = json.load(open(f"{out}/rebuild{L}.{name}.{r}.json"))
        for k in ("rebuild_mb_s", "ratio", "check_mb_s"):
            if k in doc:
                got[f"rebuild RAID {L} {k}"] = doc[k]
    for line in open(f"{out}/seq.{name}.{r}.txt"):
        m = re.match(r"^(RAID \d+ n=\d+ \S+)\s+(\S+(?: \S+)*?)\s+(\d+)\s+(\d+)\s+(\d+)\s+([\d.]+)\s", line)
        if m:
            got[f"seqbench {m.group(1)} {m.group(2)} eng MB/s"] = float(m.group(3))
            got[f"seqbench {m.group(1)} {m.group(2)} eng/fio"] = float(m.group(6))
    return got
med = {}
for name in ("old", "new"):
    per = [rows(name, r) for r in range(1, rounds + 1)]
    med[name] = {k: statistics.median(p[k] for p in per if k in p) for k in per[0]}
print(f"{'measurement':<58} {'old':>10} {'new':>10} {'new/old':>8}")
within = total = 0
for k, a in med["old"].items():
    b = med["new"].get(k)
    if b is None or a == 0:
        continue
    total += 1
    ok = abs(b / a - 1) <= tol
    within += ok
    print(f"{k:<58} {a:>10.2f} {b:>10.2f} {b / a:>8.3f}{'' if ok else '  *'}")
print(f"{within} of {total} within {tol * 100:g}% (* outside); medians of {rounds} rounds; raw files in {out}")
EOF
