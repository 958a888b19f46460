#!/usr/bin/env bash
# A profile-guided build of the irqsim binary: build it instrumented, run a training
# workload, and build it again with LLVM's branch and call counts from that run. The
# result runs the same model faster (the README's "Performance" gives the figures); it
# must give the same answers, and the script checks that before it reports success.
#
#   scripts/pgo-build.sh [OUT_BINARY]     # default: target/pgo/irqsim
#   TRAIN=bench scripts/pgo-build.sh      # train on the three bench scenarios only
#
# TRAIN=all (the default) trains on every name `scripts/same-answers.sh list` knows:
# every experiment, embedded scenario, explorer variant and the speedup sweep. The
# benchmark scenarios are among them but are not singled out, so the gain measured on
# them is not the gain of a profile fitted to them alone. TRAIN=bench trains on
# `default`, `nvme-posted` and `large` (and the engine bench) and nothing else, to show
# how much that fitting adds, and is quicker (CI uses it).
#
# Either way the training also runs `bench scenario` with its plain-heap loop, and
# `bench engine`. Code a profile never saw is optimised for size as cold code, so
# without them the heap loop, the yardstick `bench scenario` divides by, would run
# slower in this binary than in a plain release build and flatter the ratio.
#
# Needs rustup's llvm-tools component (`rustup component add llvm-tools`) for an
# llvm-profdata that reads the profiles of this rustc's LLVM, and jq (for the answers
# check). Builds in target/pgo-gen and target/pgo-use, leaving target/release alone.
# Takes two release builds (about 3 minutes each on 2 cores) and the training runs.
set -euo pipefail
# OUT_BINARY is named relative to the caller's directory; the default, to the repository.
out=${1:+$(realpath -m "$1")}
cd "$(dirname "$0")/.."

out=${out:-target/pgo/irqsim}
train=${TRAIN:-all}
case $train in
  all | bench) ;;
  *) echo "pgo-build: TRAIN must be 'all' or 'bench', not '$train'" >&2; exit 2 ;;
esac

host=$(rustc -vV | sed -n 's/^host: //p')
profdata="$(rustc --print sysroot)/lib/rustlib/$host/bin/llvm-profdata"
if [ ! -x "$profdata" ]; then
  echo "pgo-build: no llvm-profdata at $profdata; run: rustup component add llvm-tools" >&2
  exit 2
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

echo "pgo-build: instrumented build (target/pgo-gen)" >&2
RUSTFLAGS="-Cprofile-generate=$work/build" \
  cargo build --release --locked --quiet --bin irqsim --target-dir target/pgo-gen
gen=target/pgo-gen/release/irqsim

# Only the training runs' profiles are merged; build scripts of the instrumented build
# write theirs into $work/build.
export LLVM_PROFILE_FILE="$work/train/irqsim-%p-%m.profraw"
echo "pgo-build: training ($train)" >&2
if [ "$train" = all ]; then
  IRQSIM_BIN=$gen scripts/same-answers.sh record >/dev/null
fi
"$gen" bench scenario default --duration-us 10000 >/dev/null
"$gen" bench scenario nvme-posted --duration-us 10000 >/dev/null
"$gen" bench scenario large --duration-us 2000 >/dev/null
"$gen" bench engine --pending 1000 --events 1000000 >/dev/null
"$gen" bench engine --pending 100000 --events 1000000 >/dev/null
unset LLVM_PROFILE_FILE
"$profdata" merge -o "$work/merged.profdata" "$work/train"

echo "pgo-build: optimised build (target/pgo-use)" >&2
# IRQSIM_PGO_TRAINING marks the binary: `irqsim bench` reports it under "build".
IRQSIM_PGO_TRAINING=$train RUSTFLAGS="-Cprofile-use=$work/merged.profdata" \
  cargo build --release --locked --quiet --bin irqsim --target-dir target/pgo-use
mkdir -p "$(dirname "$out")"
cp target/pgo-use/release/irqsim "$out"

# Branch weights reorder code; they must not change a single result.
echo "pgo-build: checking answers against scripts/answers.md5" >&2
IRQSIM_BIN=$out scripts/same-answers.sh check scripts/answers.md5 >"$work/check.txt" || {
  grep -v '^same' "$work/check.txt" >&2
  echo "pgo-build: the profile-guided binary changed answers; not using it" >&2
  rm -f "$out"
  exit 1
}
echo "pgo-build: $out ($(grep -c '^same' "$work/check.txt") answers the same)" >&2
