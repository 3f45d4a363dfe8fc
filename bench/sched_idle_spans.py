#!/usr/bin/env python3
"""Where a pipeline's threads left a core idle, from a scheduler trace.

Reads `perf script` output of a trace taken with
    perf record -a -k mono -e sched:sched_switch,sched:sched_wakeup [-e 'probe_executor_bench:*'] -- BIN ...
and, for the threads TIDS of the process and the window [START, END] (CLOCK_MONOTONIC seconds:
executor_bench --marks=FILE writes them, or uprobes on MakeIterator / AutotunedMapParallelism),
prints how long fewer than 2 of those threads wanted a CPU (running or runnable), split into the
window's first 2 ms, its last 2 ms and the rest, and every such span over 50 µs. On a quiet
2-core machine that is the time a core idles; on a loaded one it still shows when the pipeline
had work for only one core (run it under `chrt -r` to keep other processes from changing the
timing).

usage: sched_idle_spans.py PERF_SCRIPT_TXT START END TID,TID,...
"""
import re
import sys

HEADER = re.compile(r'^\s*(\S.*?)\s+(\d+)\s+\[(\d+)\]\s+([\d.]+):\s+(\S+):\s+(.*)$')
SWITCH = re.compile(r'prev_pid=(\d+) .*prev_state=(\S+) ==> .*next_pid=(\d+)')


def main():
    path, w0, w1 = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
    tids = set(int(x) for x in sys.argv[4].split(','))
    state = {t: 'sleep' for t in tids}  # 'run', 'rq' (runnable) or 'sleep'
    wanting = lambda: sum(1 for s in state.values() if s != 'sleep')
    spans, start = [], None
    for line in open(path):
        m = HEADER.match(line)
        if not m:
            continue
        t, kind, body = float(m.group(4)), m.group(5), m.group(6)
        if t > w1:
            break
        before = wanting()
        if kind == 'sched:sched_switch':
            s = SWITCH.search(body)
            prev, prev_state, nxt = int(s.group(1)), s.group(2), int(s.group(3))
            if prev in tids:
                state[prev] = 'rq' if prev_state.startswith('R') else 'sleep'
            if nxt in tids:
                state[nxt] = 'run'
        elif kind.startswith('sched:sched_wakeup'):
            tid = int(re.search(r'pid=(\d+)', body).group(1))
            if tid in tids and state[tid] == 'sleep':
                state[tid] = 'rq'
        else:
            continue
        after = wanting()
        if t < w0:
            continue
        if before >= 2 > after:
            start = t
        elif after >= 2 > before and start is not None:
            spans.append((start - w0, t - start))
            start = None
    if start is not None:
        spans.append((start - w0, w1 - start))
    wall = w1 - w0
    parts = {'first 2 ms': 0.0, 'middle': 0.0, 'last 2 ms': 0.0}
    for at, d in spans:
        key = 'first 2 ms' if at < 2e-3 else 'last 2 ms' if at > wall - 2e-3 else 'middle'
        parts[key] += d
    total = sum(d for _, d in spans)
    print(f"window {wall * 1e3:.2f} ms; fewer than 2 threads wanting a CPU: "
          + ", ".join(f"{k} {v * 1e3:.2f} ms" for k, v in parts.items())
          + f"; total {total * 1e3:.2f} ms ({100 * total / wall:.1f}%)")
    for at, d in spans:
        if d > 50e-6:
            print(f"  at {at * 1e3:8.3f} ms: {d * 1e6:6.0f} us")


if __name__ == '__main__':
    main()
