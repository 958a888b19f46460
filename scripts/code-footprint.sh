#!/usr/bin/env bash
# How much machine code a scenario keeps running, against the host's L1 instruction
# cache: the steady state's hot code, from valgrind's callgrind with per-instruction
# counts, two runs of different lengths differenced (as scripts/per-event-counts.sh
# does), so that building the system cancels out.
#
#   scripts/code-footprint.sh SCENARIO SHORT_US LONG_US [BINARY]
#   scripts/code-footprint.sh nvme-posted 5000 10000
#   scripts/code-footprint.sh large 1000 2000 /tmp/irqsim.before
#
# For each rate R (an instruction counts as hot at R if it runs at least once per R
# events), prints the hot instructions, their bytes, the 64-byte lines that hold them
# and how much of those lines they fill; then the functions holding the most hot bytes
# at R = 50. When the hot lines at the rate of an MSI or two (R near twice a
# scenario's events per MSI) exceed the L1i (printed first), much of that code is
# fetched again for every MSI, and per-event-counts.sh shows it as L1i misses.
# Instruction sizes come from objdump for the binary, and are estimated from the gap
# to the next executed instruction in shared libraries (libm, libc). The counts are of
# the simulator's own code, not of the modelled machine, and depend only on the binary
# and the scenario, not on the host (the L1i size printed aside).
set -euo pipefail
# shellcheck source=scripts/two-runs.sh
. "$(dirname "$0")/two-runs.sh"
two_runs_args 2 9 "$@"
command -v objdump >/dev/null || { echo "objdump is not installed (binutils)" >&2; exit 2; }
two_runs --tool=callgrind --dump-instr=yes --callgrind-out-file=%d.out
objdump -d --no-show-raw-insn "$bin" >"$work/disasm"
# The level-1 instruction cache's size from sysfs ("32K"), whichever index it has.
l1i=unknown
for d in /sys/devices/system/cpu/cpu0/cache/index*; do
  if [ "$(cat "$d/level" 2>/dev/null)" = 1 ] && [ "$(cat "$d/type" 2>/dev/null)" = Instruction ]; then
    l1i=$(cat "$d/size")
  fi
done

python3 - "$scenario" "$work" "$short" "$long" "$(readlink -f "$bin")" "$l1i" <<'PY'
import collections, json, re, signal, sys
signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # quiet when piped into head
scenario, work, short, long_, binary, l1i = sys.argv[1:]

def load(d):
    """Executions per (object, address) and the function of each, from callgrind's
    output with name and position compression undone."""
    events = json.load(open(f"{work}/{d}.json"))["events"]
    runs, fn_of = collections.Counter(), {}
    names = {"ob": {}, "fn": {}}
    ob = fn = None
    prev = [0, 0]
    skip_next = False

    def name(kind, text):
        m = re.match(r"\((\d+)\)(?: (.*))?", text)
        if not m:
            return text
        if m.group(2) is not None:
            names[kind][m.group(1)] = m.group(2)
        return names[kind].get(m.group(1))

    def position(tok, i):
        if tok == "*":
            return prev[i]
        if tok[0] in "+-":
            return prev[i] + int(tok, 0)
        return int(tok, 0)

    for line in open(f"{work}/{d}.out"):
        head = line[:4]
        if head.startswith("ob="):
            ob = name("ob", line[3:].strip())
        elif head.startswith("fn="):
            fn = name("fn", line[3:].strip())
        elif head == "cfn=":
            name("fn", line[4:].strip())
        elif head == "cob=":
            name("ob", line[4:].strip())
        elif line.startswith("calls="):
            skip_next = True  # the next cost line is the call's inclusive cost
        elif line[:1] in "0123456789+-*":
            toks = line.split()
            prev[0], prev[1] = position(toks[0], 0), position(toks[1], 1)
            if skip_next:
                skip_next = False
                continue
            if len(toks) > 2:
                runs[(ob, prev[0])] += int(toks[2])
                fn_of[(ob, prev[0])] = fn
    return events, runs, fn_of

e1, r1, _ = load(short)
e2, r2, fn_of = load(long_)
n = e2 - e1
per_event = {k: (v - r1.get(k, 0)) / n for k, v in r2.items() if v > r1.get(k, 0)}

size = {}
addrs = []
for line in open(f"{work}/disasm"):
    m = re.match(r"\s*([0-9a-f]+):\t", line)
    if m:
        addrs.append(int(m.group(1), 16))
for a, b in zip(addrs, addrs[1:]):
    if 0 < b - a <= 15:
        size[a] = b - a

def bytes_of(hot):
    by_obj = collections.defaultdict(list)
    for ob, a in hot:
        by_obj[ob].append(a)
    out = {}
    for ob, xs in by_obj.items():
        xs.sort()
        for i, a in enumerate(xs):
            if ob == binary and a in size:
                out[(ob, a)] = size[a]
            else:  # a shared library: the gap to the next executed instruction
                gap = xs[i + 1] - a if i + 1 < len(xs) else 4
                out[(ob, a)] = min(max(gap, 1), 8)
    return out

widest = [k for k, v in per_event.items() if v * 200 >= 1]
sized = sum(1 for ob, a in widest if ob == binary and a in size)
print(f"{scenario}: {n} events between the runs; L1i of this host: {l1i}; "
      f"objdump sized {sized} of the {len(widest)} instructions hot at R = 200 "
      f"(the rest are in shared libraries, or the binary was not matched)")
print("hot at R: instructions run at least once per R events (steady state)")
for rate in (5, 10, 20, 50, 100, 200):
    hot = [k for k, v in per_event.items() if v * rate >= 1]
    sizes = bytes_of(hot)
    total = sum(sizes.values())
    lines = {(ob, a >> 6) for ob, a in hot}
    print(f"  R = {rate:3d}: {len(hot):6d} instructions, {total / 1024:5.1f} KiB, "
          f"in {len(lines):5d} lines = {len(lines) * 64 / 1024:5.1f} KiB "
          f"({100 * total / max(1, len(lines) * 64):.0f}% filled)")
hot = [k for k, v in per_event.items() if v * 50 >= 1]
by_fn = collections.Counter()
for k, b in bytes_of(hot).items():
    by_fn[fn_of.get(k) or "?"] += b
print("functions holding the most hot bytes at R = 50:")
for f, b in by_fn.most_common(20):
    print(f"  {b / 1024:5.2f} KiB  {f[:110]}")
PY
