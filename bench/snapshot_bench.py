#!/usr/bin/env python3
"""Distributed snapshots (docs/SNAPSHOTS.md): save and load rates against the pipeline's own.

    python3 bench/snapshot_bench.py BUILD [NUM_WORKERS] [REPEAT]

On the TFRecord parse pipeline (sluicectl gen: 8 files x 8192 records of 3 KiB,
tf_record_dataset(...).map(parse_example({image, label})).batch(256)), through a local
coordinator + NUM_WORKERS workers (default 2):
  1. `sluicectl bench --coordinator` of the pipeline: steps/s (each step one saved element);
  2. `sluicectl save` of the same pipeline: steps (chunks' elements) per wall second, and the
     CPU seconds of the workers and sluicectl over it;
  3. `sluicectl bench` (local, in-process) of the pipeline and of load('DIR'): steps/s and the
     process's CPU seconds per step, over one pass (256 steps: the process's start-up and the
     first reads weigh in) and over REPEAT passes (`.repeat(REPEAT)` on both, default 10: the
     steady rate; from the page cache, as the chunks were just written); then over REPEAT
     passes load('DIR', num_parallel_calls=tf.data.AUTOTUNE), the opt-in read-ahead.
Prints the load average next to every figure.
"""
import json, os, resource, subprocess, sys, time
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sluice_cluster import SluiceCluster, run_sluicectl_bench, scratch_dir

build = os.path.abspath(sys.argv[1])
num_workers = int(sys.argv[2]) if len(sys.argv) > 2 else 2
repeat = int(sys.argv[3]) if len(sys.argv) > 3 else 10
ctl = os.path.join(build, "bin", "sluicectl")


def load():
    return open("/proc/loadavg").read().split()[0]


def cpu_seconds(pid):
    """utime + stime of a live process, in seconds."""
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


records = scratch_dir("snap-rec-")
subprocess.run([ctl, "gen", "--format=tfrecord", f"--out={records}", "--num_files=8",
                "--records_per_file=8192", "--image_bytes=3072"], check=True, capture_output=True)
files = sorted(os.path.join(records, f) for f in os.listdir(records))
flist = ", ".join(f"'{f}'" for f in files)
parse = (f"tf_record_dataset([{flist}]).map(parse_example({{'image': "
         f"FixedLenFeature([], tf.string), 'label': FixedLenFeature([], tf.int64)}})).batch(256)")
steps = len(files) * 8192 // 256

with SluiceCluster(build, num_workers=num_workers) as c:
    workers = c.procs[1:]
    w0 = sum(cpu_seconds(p.pid) for p in workers)
    b = c.bench(parse, warmup_steps=0)
    w1 = sum(cpu_seconds(p.pid) for p in workers)
    print(f"service bench of the pipeline: {b['steps_per_second']:.1f} steps/s "
          f"({b['steps']} steps; worker CPU {w1 - w0:.2f} s) load {load()}", flush=True)
    snap = scratch_dir("snap-out-")
    w0 = sum(cpu_seconds(p.pid) for p in workers)
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    out = subprocess.run([ctl, "save", f"--coordinator={c.coordinator}", f"--pipeline={parse}",
                          f"--path={snap}/s"], capture_output=True, text=True, timeout=600)
    wall = time.monotonic() - t0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    w1 = sum(cpu_seconds(p.pid) for p in workers)
    if out.returncode != 0:
        sys.exit(f"save failed: {out.stderr}")
    print(out.stdout.strip())
    ctl_cpu = (r1.ru_utime + r1.ru_stime) - (r0.ru_utime + r0.ru_stime)
    print(f"save: {steps / wall:.1f} steps/s ({wall:.2f} s wall; worker CPU {w1 - w0:.2f} s, "
          f"sluicectl CPU {ctl_cpu:.2f} s) load {load()}", flush=True)
    print(f"save / service bench: {steps / wall / b['steps_per_second']:.2f}", flush=True)

    lb = c.bench(f"load('{snap}/s')", warmup_steps=0)
    print(f"service bench of load(): {lb['steps_per_second']:.1f} steps/s load {load()}",
          flush=True)

def local(pipeline):
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    res = run_sluicectl_bench(build, pipeline, warmup_steps=0)
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (r1.ru_utime + r1.ru_stime) - (r0.ru_utime + r0.ru_stime)
    return res["steps_per_second"], cpu / max(res["steps"], 1)

p_rate, p_cpu = local(parse)
print(f"local bench of the pipeline: {p_rate:.1f} steps/s, {p_cpu * 1e3:.2f} ms CPU/step "
      f"load {load()}", flush=True)
l_rate, l_cpu = local(f"load('{snap}/s')")
print(f"local bench of load(): {l_rate:.1f} steps/s, {l_cpu * 1e3:.2f} ms CPU/step "
      f"load {load()}", flush=True)
print(f"load / pipeline: {l_rate / p_rate:.2f}x steps/s, {p_cpu / l_cpu:.2f}x less CPU per step")

p_rate, p_cpu = local(f"{parse}.repeat({repeat})")
print(f"local bench of the pipeline x{repeat}: {p_rate:.1f} steps/s, {p_cpu * 1e3:.3f} ms CPU/step "
      f"load {load()}", flush=True)
l_rate, l_cpu = local(f"load('{snap}/s').repeat({repeat})")
print(f"local bench of load() x{repeat}: {l_rate:.1f} steps/s, {l_cpu * 1e3:.3f} ms CPU/step "
      f"load {load()}", flush=True)
print(f"load / pipeline x{repeat}: {l_rate / p_rate:.2f}x steps/s, "
      f"{p_cpu / l_cpu:.2f}x less CPU per step")
# The opt-in read-ahead (docs/SNAPSHOTS.md): checksums verified on the pool ahead of the consumer.
a_rate, a_cpu = local(f"load('{snap}/s', num_parallel_calls=tf.data.AUTOTUNE).repeat({repeat})")
print(f"local bench of load(num_parallel_calls=AUTOTUNE) x{repeat}: {a_rate:.1f} steps/s, "
      f"{a_cpu * 1e3:.3f} ms CPU/step load {load()}", flush=True)
print(f"load(AUTOTUNE) / pipeline x{repeat}: {a_rate / p_rate:.2f}x steps/s, "
      f"{p_cpu / a_cpu:.2f}x less CPU per step")
