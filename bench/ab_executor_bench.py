#!/usr/bin/env python3
"""executor_bench from two builds, alternately, same arguments: median per row of each.

    python3 bench/ab_executor_bench.py OLD_BENCH NEW_BENCH ROUNDS -- EXECUTOR_BENCH_ARGS...

OLD_BENCH / NEW_BENCH are executor_bench binaries (copy one aside before rebuilding). Each
round runs OLD then NEW (then NEW then OLD on odd rounds, so neither always runs second).
Prints, per row and build, the median over rounds of records/s, CPU µs per element and cores
(CPU time / wall time), and the load average range seen: on a shared machine the CPU column is
the figure to compare; records/s and cores only mean something when the load stays under ~1.
"""
import statistics
import subprocess
import sys


def load():
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


def run(binary, args):
    out = subprocess.run([binary] + args, check=True, capture_output=True, text=True).stdout
    rows = {}
    for line in out.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 5 and cells[1].replace(".", "").isdigit():
            rows[cells[0]] = (float(cells[1]), float(cells[3]), float(cells[4]))
    return rows


def main():
    old, new, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
    args = sys.argv[sys.argv.index("--") + 1:] if "--" in sys.argv else []
    results = {}  # (row, build) -> [(rate, cpu_us, cores)]
    loads = []
    for r in range(rounds):
        order = (("old", old), ("new", new)) if r % 2 == 0 else (("new", new), ("old", old))
        for tag, binary in order:
            loads.append(load())
            for row, v in run(binary, args).items():
                results.setdefault((row, tag), []).append(v)
        print(f"round {r} done, load {loads[-1]:.2f}", file=sys.stderr, flush=True)
    print(f"{rounds} alternating rounds, load average {min(loads):.2f}-{max(loads):.2f}")
    print("| row | build | elements/s | CPU µs/elem | cores |")
    print("|---|---|---|---|---|")
    for row in dict.fromkeys(k[0] for k in results):
        for tag in ("old", "new"):
            vals = results.get((row, tag), [])
            if not vals:
                continue
            med = [statistics.median(v[i] for v in vals) for i in range(3)]
            print(f"| {row} | {tag} | {med[0]:,.0f} | {med[1]:.3f} | {med[2]:.2f} |")


if __name__ == "__main__":
    main()
