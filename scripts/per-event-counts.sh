#!/usr/bin/env bash
# Per-event instruction, cache-miss and branch-mispredict counts of one scenario, from
# valgrind's cachegrind: two runs of different lengths, differenced, so that building
# the system and filling its tables cancel out and what is left is the steady state.
#
#   scripts/per-event-counts.sh SCENARIO SHORT_US LONG_US [BINARY]
#   scripts/per-event-counts.sh large 1000 2000
#   scripts/per-event-counts.sh default 10000 20000 /tmp/irqsim.before
#
# Prints one line of per-event figures; then the instructions per event by part of the
# model (the event queue, the descriptor line, the kernel algorithms, ...: each
# instruction goes to the part whose source file it comes from, inlined code included;
# standard-library code goes to the part of the function it is inlined into); then the
# functions that gain the most L1 data misses per event between the two runs, and those
# that gain the most last-level data misses. The counts are valgrind's simulation of the simulator's own code (L1 sizes as
# this host reports them; a last level of LL_BYTES, by default this host's per-core L2
# as sysfs gives it, else 2 MiB), not hardware counters and not a property of the
# modelled machine. The L2 stands in for the last level because it is the last cache a
# core has to itself: a miss there goes to a shared L3, which costs a `large` event
# most on hosts with the smallest L2.
# Deterministic: the same binary and scenario give the same counts on any host with the
# same cache sizes, which makes small layout changes measurable where wall time is not.
#
# PAGES=1 counts pages instead of lines: the "L1d" becomes a 64-entry, fully associative
# cache of 4 KiB lines (a first-level data TLB's reach) and the last level 2,048 entries
# of 4 KiB, 16-way (a second-level TLB's). Its misses approximate TLB misses, which
# cachegrind does not model otherwise: a change that spreads hot data over more pages
# shows there even when its line counts do not move. The entry counts are settable
# (DTLB_ENTRIES, STLB_ENTRIES); the defaults are those of recent Intel and AMD cores'
# first and second levels for 4 KiB pages, approximately. An approximation, not a
# hardware count.
set -euo pipefail
# shellcheck source=scripts/two-runs.sh
. "$(dirname "$0")/two-runs.sh"
two_runs_args 2 8 "$@"
# The per-core L2's size from sysfs ("1024K"), in bytes; empty if sysfs does not say.
host_l2_bytes() {
  local d
  for d in /sys/devices/system/cpu/cpu0/cache/index*; do
    if [ "$(cat "$d/level" 2>/dev/null)" = 2 ]; then
      local size
      size=$(cat "$d/size" 2>/dev/null) || return 0
      case $size in
        *K) echo $((${size%K} * 1024)) ;;
        *M) echo $((${size%M} * 1048576)) ;;
        *[0-9]) echo "$size" ;;
      esac
      return 0
    fi
  done
}
ll=${LL_BYTES:-$(host_l2_bytes)}
ll=${ll:-2097152}
if [ "${PAGES:-0}" = 1 ]; then
  dtlb=${DTLB_ENTRIES:-64} stlb=${STLB_ENTRIES:-2048}
  caches=(--D1=$((dtlb * 4096)),"$dtlb",4096 --LL=$((stlb * 4096)),16,4096)
  unit="pages (simulated TLB)"
  last_level="$stlb-entry"
else
  caches=(--LL="$ll",16,64)
  unit="lines"
  last_level="$((ll / 1024)) KiB"
fi
two_runs --tool=cachegrind --cache-sim=yes --branch-sim=yes "${caches[@]}" \
  --cachegrind-out-file=%d.out

python3 - "$work" "$short" "$long" "$unit" "$last_level" <<'PY'
import collections, json, signal, sys
signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # quiet when piped into head
work, short, long_, unit, last_level = sys.argv[1:]

# Parts of the model, matched in order against a source file's path, or, for code of
# the standard library and of libc, against the name of the function it sits in.
PARTS = [
    ("event queue", ["src/engine/queue.rs", "irqsim::engine::queue"]),
    ("kernel algorithms (coroutines)", ["src/engine/coro.rs", "src/kernel/", "irqsim::kernel::"]),
    ("descriptor lines (MESI)", ["crates/pid-model/", "pid_model::"]),
    ("MSI ledger", ["src/system/ledger.rs", "src/system/token_bag.rs", "src/system/parked.rs",
                    "irqsim::system::ledger", "irqsim::system::token_bag"]),
    ("I/O fabric, MSI sources", ["src/system/fabric.rs", "src/system/sources.rs",
                                 "crates/iommu-sim/src/vtd/fabric.rs", "irqsim::system::fabric",
                                 "irqsim::system::sources"]),
    ("IOMMU", ["crates/iommu-sim/", "src/system/iommu.rs", "iommu_sim::", "irqsim::system::iommu"]),
    ("local APIC", ["crates/apic-sim/", "apic_sim::"]),
    ("random draws", ["crates/devices/src/dist.rs", "crates/devices/src/arrival", "rand_chacha",
                      "rand_core", "/rand-", "libm", "dbl-64", "devices::dist", "devices::arrival"]),
    ("devices, jobs", ["crates/devices/", "src/system/io.rs", "src/system/device_runtime.rs",
                       "src/system/transmit.rs", "devices::", "irqsim::system::io",
                       "irqsim::system::device_runtime"]),
    ("latency statistics", ["hdrhistogram", "src/system/latency_log.rs", "latency_log"]),
    ("allocator, memcpy", ["malloc", "memmove", "memcpy", "memset"]),
    ("event loop, CPU states, tasks", ["src/system/", "crates/sim-core/"]),
]
OTHER = "standard library in the event loop, rest"

def part_of(path, fn):
    ours = not (path.startswith("/rustc/") or path.startswith("./") or path == "???")
    for name, keys in PARTS:
        if any(k in path for k in keys if "/" in k or "." in k) and ours:
            return name
    for name, keys in PARTS:
        if any(k in path or k in (fn or "") for k in keys):
            return name
    return OTHER

def load(d):
    events = json.load(open(f"{work}/{d}.json"))["events"]
    names, totals, fn, fl, src = None, None, None, "???", "???"
    per_fn, last_fn, by_part = collections.Counter(), collections.Counter(), collections.Counter()
    for line in open(f"{work}/{d}.out"):
        if line.startswith("events:"):
            names = line.split()[1:]
        elif line.startswith("summary:"):
            totals = dict(zip(names, map(int, line.split()[1:])))
        elif line.startswith("fl="):
            fl = src = line[3:].strip()
        elif line.startswith(("fi=", "fe=")):
            src = line[3:].strip()
        elif line.startswith("fn="):
            fn = line[3:].strip()
            src = fl
        elif line[:1].isdigit():
            v = dict(zip(names, map(int, line.split()[1:])))
            per_fn[fn] += v.get("D1mr", 0) + v.get("D1mw", 0)
            last_fn[fn] += v.get("DLmr", 0) + v.get("DLmw", 0)
            by_part[part_of(src, fn)] += v.get("Ir", 0)
    return events, totals, per_fn, last_fn, by_part

e1, t1, f1, l1, p1 = load(short)
e2, t2, f2, l2, p2 = load(long_)
n = e2 - e1
d = lambda k: (t2[k] - t1[k]) / n
print(f"{n} events between the runs; cache misses count {unit}; per event: "
      f"instructions {d('Ir'):.1f}, L1i misses {d('I1mr'):.3f}, "
      f"L1d misses {d('D1mr') + d('D1mw'):.3f}, "
      f"last-level ({last_level}) misses {d('ILmr') + d('DLmr') + d('DLmw'):.3f}, "
      f"conditional branches mispredicted {d('Bcm'):.2f} of {d('Bc'):.1f}, "
      f"indirect {d('Bim'):.2f} of {d('Bi'):.1f}")
print("Instructions per event, by part of the model:")
parts = sorted(((p2[k] - p1.get(k, 0)) / n, k) for k in p2)
for v, k in reversed(parts):
    print(f"  {v:7.1f}  {100 * v / d('Ir'):5.1f}%  {k}")
gain = sorted(((f2[k] - f1.get(k, 0)) / n, k) for k in f2)
print(f"L1d misses ({unit}) per event, by function:")
for v, k in reversed(gain[-15:]):
    print(f"  {v:6.3f}  {k[:120]}")
last = sorted(((l2[k] - l1.get(k, 0)) / n, k) for k in l2)
print(f"Last-level data misses ({unit}) per event, by function:")
for v, k in reversed(last[-10:]):
    if v > 0:
        print(f"  {v:6.3f}  {k[:120]}")
PY
