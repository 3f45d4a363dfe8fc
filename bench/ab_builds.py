#!/usr/bin/env python3
"""Two builds side by side (an A/B for "no measurable slowdown"): old and new alternately, same commands.

    python3 bench/ab_builds.py OLD_BUILD NEW_BUILD [ROUNDS]

Rows: sluicectl bench (in-process) on range(N).batch(131072) and on the TFRecord parse pipeline,
and sluicectl bench --coordinator through a local coordinator + 1 worker on the 1 KiB and 4 MiB
fixed streams. Prints steps/s per run and the load average around each.
"""
import os, subprocess, sys, json
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sluice_cluster import (SluiceCluster, run_sluicectl_bench, fixed_size_pipelines,
                            scratch_dir, tfrecord_parse_pipeline)

old, new = sys.argv[1], sys.argv[2]
rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 3
parse = tfrecord_parse_pipeline(old, scratch_dir("ab-rec-"))
local_rows = [("range.batch(131072)", "range(1099511627776).batch(131072)"),
              ("tfrecord parse batch(256)", parse)]
service_rows = [("1 KiB stream", fixed_size_pipelines(1024)[1]),
                ("4 MiB stream", fixed_size_pipelines(4 << 20)[1])]
def load(): return open("/proc/loadavg").read().split()[0]
results = {}
for r in range(rounds):
    for tag, build in (("old", old), ("new", new)):
        for name, p in local_rows:
            try:
                res = run_sluicectl_bench(build, p, seconds=3, warmup_steps=5)
                v = res["steps_per_second"]
            except Exception as e:
                v = float("nan"); print(name, tag, e)
            results.setdefault((name, tag), []).append(v)
            print(f"round {r} {tag} {name}: {v:.1f} steps/s load {load()}", flush=True)
        with SluiceCluster(build, num_workers=1) as c:
            for name, p in service_rows:
                try:
                    v = c.bench(p, seconds=3, warmup_steps=20)["steps_per_second"]
                except Exception as e:
                    v = float("nan"); print(name, tag, e)
                results.setdefault((name, tag), []).append(v)
                print(f"round {r} {tag} {name}: {v:.1f} steps/s load {load()}", flush=True)
print("\n| row | old steps/s (median) | new steps/s (median) | new/old |\n|---|---|---|---|")
for name, _ in local_rows + service_rows:
    o = sorted(results[(name, "old")]); n = sorted(results[(name, "new")])
    mo, mn = o[len(o)//2], n[len(n)//2]
    print(f"| {name} | {mo:.0f} | {mn:.0f} | {mn/mo:.3f} |")
