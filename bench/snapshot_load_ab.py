#!/usr/bin/env python3
"""Snapshot load CPU per step, builds alternating (A/B on a loaded machine).

    python3 bench/snapshot_load_ab.py SNAPSHOT_DIR ROUNDS REPEAT BUILD [BUILD...]

Runs a local `sluicectl bench --devices=CPU:0 --pipeline="load(SNAPSHOT_DIR).repeat(REPEAT)"`
with each BUILD in turn, ROUNDS times, and prints steps/s and the process's CPU seconds per
step (user + sys, and user alone) with the load average. A snapshot to read: the one
bench/snapshot_bench.py saves (it prints its directory).
"""
import os, resource, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sluice_cluster import run_sluicectl_bench

snap, rounds, repeat = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
builds = sys.argv[4:]


def load():
    return open("/proc/loadavg").read().split()[0]


for r in range(rounds):
    for b in builds:
        r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        res = run_sluicectl_bench(b, f"load('{snap}').repeat({repeat})", warmup_steps=0)
        r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (r1.ru_utime + r1.ru_stime) - (r0.ru_utime + r0.ru_stime)
        user = r1.ru_utime - r0.ru_utime
        print(f"round {r} {b}: {res['steps_per_second']:.1f} steps/s, "
              f"{cpu / res['steps'] * 1e3:.3f} ms CPU/step (user {user / res['steps'] * 1e3:.3f}) "
              f"load {load()}", flush=True)
