#!/usr/bin/env python3
"""Share of a parallel TFRecord map's CPU samples spent under its input's read lock.

Reads `perf record --call-graph dwarf` files of executor_bench (--maps=parallel) and counts the
samples whose call stack is inside SequentialRecordIterator::GetNextBlockDeferringChecks (the
read a pool job does under the map's input lock; its BlockCheck lambda, run after the lock,
is not counted), with the leaf functions under the lock that take the most samples.

    perf record -F 4000 --call-graph dwarf,16384 -o before.data OLD/bench/executor_bench \
        --batch_sizes= --records=/tmp/rec --reps=10 --maps=parallel
    perf record ... -o after.data NEW/bench/executor_bench ...
    python3 bench/perf_lock_share.py before.data after.data
"""
import subprocess
import sys


def analyze(path):
    out = subprocess.run(['perf', 'script', '-i', path, '-F', 'comm,tid,ip,sym', '--no-inline'],
                         capture_output=True, text=True, check=True).stdout
    total = locked = 0
    leaves = {}
    for sample in out.split('\n\n'):
        lines = [l.strip() for l in sample.strip().split('\n') if l.strip()]
        if len(lines) < 2:
            continue
        syms = [' '.join(f.split()[1:]) for f in lines[1:]]
        total += 1
        if any('GetNextBlockDeferringChecks' in s and 'lambda' not in s for s in syms):
            locked += 1
            leaves[syms[0][:70]] = leaves.get(syms[0][:70], 0) + 1
    return total, locked, leaves


def main():
    for path in sys.argv[1:]:
        total, locked, leaves = analyze(path)
        print(f'{path}: {total} samples, {locked} under the read lock '
              f'({100.0 * locked / max(total, 1):.1f}%)')
        for leaf, n in sorted(leaves.items(), key=lambda kv: -kv[1])[:8]:
            print(f'  {100.0 * n / total:5.1f}%  {leaf}')


if __name__ == '__main__':
    main()
