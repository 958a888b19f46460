#!/usr/bin/env bash
# Side-by-side wall-clock speed of several irqsim binaries on one scenario: rounds of
# `bench scenario --no-heap`, one run of each binary per round, so that drift in the
# host's speed lands on every binary alike. Prints each binary's median, least and
# greatest ns per event, then each later binary's time over the first's, round by round.
#
#   scripts/compare-speed.sh SCENARIO ROUNDS DURATION_US BINARY...
#   scripts/compare-speed.sh large 7 5000 /tmp/irqsim.before target/release/irqsim
#
# On a shared 2-core VM single runs vary by several percent; a difference smaller than
# the spread of the runs is not a result. Each comparison ends with a sign test over
# the rounds and a resampled 90% interval on the median ratio, to say so. For small
# layout changes, compare scripts/per-event-counts.sh instead: its counts do not vary.
set -euo pipefail
if [ $# -lt 4 ]; then
  sed -n '2,9p' "$0" >&2
  exit 2
fi
scenario=$1 rounds=$2 duration=$3
shift 3
for bin in "$@"; do
  [ -x "$bin" ] || { echo "no binary at $bin" >&2; exit 2; }
done
results=$(mktemp)
trap 'rm -f "$results"' EXIT
for _ in $(seq "$rounds"); do
  for bin in "$@"; do
    ns=$("$bin" bench scenario "$scenario" --no-heap --duration-us "$duration" --json |
      python3 -c 'import json, sys; print(json.load(sys.stdin)["ns_per_event"])')
    printf '%s\t%s\n' "$bin" "$ns" >>"$results"
  done
done
python3 - "$results" "$@" <<'PY'
import math, random, statistics, sys
path, bins = sys.argv[1], sys.argv[2:]
runs = {b: [] for b in bins}
for line in open(path):
    b, ns = line.rstrip("\n").split("\t")
    runs[b].append(float(ns))
for b in bins:
    v = sorted(runs[b])
    print(f"{b}: median {statistics.median(v):.1f} ns/event, "
          f"least {v[0]:.1f}, greatest {v[-1]:.1f} ({len(v)} runs)")
# Each round runs the binaries back to back, so the ratio within a round cancels the
# host's slow drift, which moves the medians above by more than a small change does.
base = bins[0]
for b in bins[1:]:
    ratios = sorted(x / y for x, y in zip(runs[b], runs[base]))
    faster = sum(r < 1 for r in ratios)
    print(f"{b} / {base}, round by round: median {statistics.median(ratios):.3f}, "
          f"least {ratios[0]:.3f}, greatest {ratios[-1]:.3f}; "
          f"faster in {faster} of {len(ratios)} rounds")
    # Whether the rounds say anything at all: a two-sided sign test (the chance of a
    # count at least this lopsided if neither build were faster), and an interval on
    # the median ratio by resampling the rounds (seeded, so a rerun prints the same).
    n = len(ratios)
    k = min(faster, n - faster)
    p = min(1.0, 2 * sum(math.comb(n, i) for i in range(k + 1)) / 2 ** n)
    rng = random.Random(1)
    medians = sorted(statistics.median(rng.choices(ratios, k=n)) for _ in range(2000))
    print(f"    sign test p = {p:.3f}; median ratio 90% interval "
          f"{medians[100]:.3f}-{medians[1899]:.3f} (resampled rounds); "
          f"an interval that holds 1 is no result")
PY
