#!/usr/bin/env bash
# Same answers: a digest of every experiment's, embedded scenario's, sweep's and
# explorer run's JSON, with the fields that measure this machine rather than the model
# taken out (wall-clock times, rates per wall second, peak memory, and the engine's
# `events` count, which an engine change may alter without changing any answer).
#
#   scripts/same-answers.sh record [NAME...] > answers.md5   # digests from the current build
#   scripts/same-answers.sh check answers.md5 [NAME...]      # rebuild, compare; exit 1 on a change
#   scripts/same-answers.sh list                             # the names it knows
#
# Run `record` before a change that must not alter results (performance work, a
# refactor) and `check` after it. `scripts/answers.md5` holds the digests of the tree
# as committed; CI checks two of them. A change that is meant to alter results records
# the file again in the same commit, and says why in the message.
set -euo pipefail
# IRQSIM_BIN may be named relative to the caller's directory.
if [ -n "${IRQSIM_BIN:-}" ] && [ -e "$IRQSIM_BIN" ]; then
  IRQSIM_BIN=$(realpath "$IRQSIM_BIN")
fi
cd "$(dirname "$0")/.."

BIN=${IRQSIM_BIN:-target/release/irqsim}

experiments=(posted-vs-remapped pir-variants coalesce-loops vmd nvme-posted nic-napi
  smmu-cmdsync ipi-cluster shootdown-under-irq rte-cache ioapic-mask)
scenarios=(default remapped faulty-device nvme-posted vmd-remap nic-napi large arm-nvme
  shootdown-nvme retrigger-stall)
explores=(copy-then-xchg rfc)

# Keys that measure the machine running the model, wherever they appear.
strip='walk(if type == "object" then del(.wall_time_s, .wall_s, .states_per_s, .events, .peak_memory_mib, .build_time_s) else . end)'

all_names() {
  local n
  for n in "${experiments[@]}"; do echo "experiment/$n"; done
  for n in "${scenarios[@]}"; do echo "run/$n"; done
  for n in "${explores[@]}"; do echo "explore/$n"; done
  echo "sweep/speedup"
}

# Prints the normalised JSON of one name on stdout.
answer() {
  local kind=${1%%/*} name=${1#*/}
  case $kind in
    experiment) "$BIN" experiment "$name" --json ;;
    run) "$BIN" run "$name" --json - ;;
    explore) "$BIN" explore --variant "$name" --json || [ $? -eq 1 ] ;;
    sweep)
      local dir
      dir=$(mktemp -d)
      "$BIN" sweep "scenarios/sweeps/$name.toml" --out "$dir" >/dev/null
      # The sweep's header and every point's record, in point order (workers finish
      # in any order).
      { cat "$dir/sweep.json"; jq -s 'sort_by(.point)' "$dir/points.jsonl"; } | jq -s .
      rm -rf "$dir"
      ;;
    *) echo "same-answers: unknown name '$1' (see: $0 list)" >&2; return 2 ;;
  esac | jq -S "$strip"
}

digest() {
  local name json
  for name in "$@"; do
    # Captured first, so a run that fails is an error and not the digest of nothing.
    json=$(answer "$name") || { echo "same-answers: $name failed" >&2; exit 2; }
    echo "$(printf '%s\n' "$json" | md5sum | cut -d' ' -f1)  $name"
  done
}

build() {
  if [ -z "${IRQSIM_BIN:-}" ]; then
    cargo build --release --locked --quiet --bin irqsim
  fi
}

command -v jq >/dev/null || { echo "same-answers: needs jq" >&2; exit 2; }

need_binary() {
  [ -x "$BIN" ] || { echo "same-answers: no irqsim binary at $BIN (set IRQSIM_BIN)" >&2; exit 2; }
}

case ${1:-} in
  list) all_names ;;
  record)
    shift
    build
    need_binary
    if [ $# -eq 0 ]; then mapfile -t names < <(all_names); else names=("$@"); fi
    digest "${names[@]}"
    ;;
  check)
    if [ $# -lt 2 ] || [ ! -f "$2" ]; then
      echo "usage: $0 check FILE [NAME...] (FILE: digests from \`record\`)" >&2
      exit 2
    fi
    file=$2
    shift 2
    build
    need_binary
    if [ $# -eq 0 ]; then mapfile -t names < <(cut -d' ' -f3 "$file"); else names=("$@"); fi
    changed=0
    for name in "${names[@]}"; do
      want=$(awk -v n="$name" '$2 == n { print $1 }' "$file")
      [ -n "$want" ] || { echo "same-answers: $name is not in $file" >&2; exit 2; }
      got=$(digest "$name") || exit 2
      got=${got%% *}
      if [ "$got" = "$want" ]; then
        echo "same     $name"
      else
        echo "CHANGED  $name (recorded $want, now $got)"
        changed=1
      fi
    done
    exit $changed
    ;;
  *)
    echo "usage: $0 record [NAME...] | check FILE [NAME...] | list" >&2
    exit 2
    ;;
esac
