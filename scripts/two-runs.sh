# Sourced by per-event-counts.sh and code-footprint.sh, which both run one scenario
# under valgrind for two durations at once and difference the counts, so that building
# the system cancels out and what is left is the steady state.
#
#   two_runs_args USAGE_FIRST USAGE_LAST "$@"  sets scenario, short, long, bin and work
#                                              (a temporary directory, removed on exit)
#   two_runs VALGRIND_ARG...                   runs both; "%d" in an argument becomes
#                                              $work/DURATION, and each run's report
#                                              lands in $work/DURATION.json

two_runs_args() {
  local first=$1 last=$2
  shift 2
  if [ $# -lt 3 ]; then
    sed -n "${first},${last}p" "$0" >&2
    exit 2
  fi
  scenario=$1 short=$2 long=$3
  # A scenario file or binary named relative to the caller's directory stays found
  # after the cd below.
  [ -f "$scenario" ] && scenario=$(realpath "$scenario")
  bin=${4:-}
  [ -n "$bin" ] && [ -e "$bin" ] && bin=$(realpath "$bin")
  cd "$(dirname "$0")/.."
  bin=${bin:-target/release/irqsim}
  command -v valgrind >/dev/null || { echo "valgrind is not installed" >&2; exit 2; }
  [ -x "$bin" ] || { echo "no binary at $bin (cargo build --release --bin irqsim)" >&2; exit 2; }
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
}

two_runs() {
  local d
  for d in "$short" "$long"; do
    valgrind "${@//%d/$work/$d}" \
      "$bin" bench scenario "$scenario" --no-heap --duration-us "$d" --json \
      >"$work/$d.json" 2>"$work/$d.err" &
  done
  wait # returns 0 whatever the runs did; a run that failed is reported below
  for d in "$short" "$long"; do
    if ! grep -q '"events"' "$work/$d.json"; then
      echo "the run of $d us printed no report:" >&2
      grep -v -e '^==' -e '^--[0-9]*--' "$work/$d.err" | head -5 >&2
      exit 1
    fi
  done
}
