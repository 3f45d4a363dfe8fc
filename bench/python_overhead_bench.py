"""Python iteration overhead per step against C++ (issue 16's target: <= 5 us at 1 KiB steps).

Runs the same local pipeline (a constant 1 KiB int32 tensor repeated, batched by R over R
replicas: 1 KiB per replica per step, host memory; the cheapest pipeline, so that the
difference is not lost in the pipeline's own cost) through build/bench/python_overhead_bench (the C++ public
API) and through `sluice` from Python, interleaved, and prints the medians per step and their
difference. Both loops touch the first value of replica 0 every step.

    PYTHONPATH=build/python /usr/bin/python3 bench/python_overhead_bench.py --steps 200000
"""

import argparse
import json
import os
import statistics
import subprocess
import time

import numpy as np

import sluice


def expression(steps, replicas):
    one = "from_tensors(tf.constant(0, dtype=tf.int32, shape=[256]))"  # 1 KiB
    if replicas == 1:
        return "%s.repeat(%d)" % (one, steps)
    return "%s.repeat(%d).batch(%d)" % (one, steps * replicas, replicas)


def python_ns_per_step(steps, replicas):
    strategy = sluice.MirroredStrategy(["CPU:%d" % r for r in range(replicas)])
    ds = sluice.data.parse(expression(steps, replicas))
    dist = strategy.experimental_distribute_dataset(
        ds, sluice.InputOptions(experimental_fetch_to_device=False))
    n = 0
    checksum = 0
    start = time.perf_counter_ns()
    for x in dist:
        first = x.values[0] if replicas > 1 else x
        checksum += int(np.asarray(first).flat[0])  # a zero-copy view, as a trainer would take
        n += 1
    elapsed = time.perf_counter_ns() - start
    assert n == steps, (n, steps)
    return elapsed / n


def cpp_ns_per_step(binary, steps, replicas):
    out = subprocess.run([binary, "--expression=" + expression(steps, replicas),
                          "--replicas=%d" % replicas, "--reps=1"],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])["ns_per_step"]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=200000)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--build_dir", default=os.environ.get("SLUICE_BUILD_DIR", "build"))
    a = p.parse_args()
    binary = os.path.join(a.build_dir, "bench", "python_overhead_bench")
    print("load average before: %.2f %.2f %.2f" % os.getloadavg())
    print("| replicas | steps | C++ us/step | Python us/step | overhead us/step |")
    print("|---|---|---|---|---|")
    for replicas in (1, 2, 8):
        cpp, py = [], []
        for _ in range(a.reps):
            cpp.append(cpp_ns_per_step(binary, a.steps, replicas))
            py.append(python_ns_per_step(a.steps, replicas))
        c, q = statistics.median(cpp) / 1e3, statistics.median(py) / 1e3
        print("| %d | %d | %.2f | %.2f | %.2f |" % (replicas, a.steps, c, q, q - c))
    print("load average after: %.2f %.2f %.2f" % os.getloadavg())


if __name__ == "__main__":
    main()
