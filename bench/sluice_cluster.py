"""A local Sluice service for the benchmark scripts: one sluice-coordinator and W sluice-workers
on loopback (port 0 + port files), plus `sluicectl bench` through it.

    with SluiceCluster(build_dir, num_workers=1) as cluster:
        result = cluster.bench(pipeline, devices="CPU:0", seconds=3, warmup_steps=10)
        result["steps_per_second"], result["bytes_per_second"]

Every process is started here and stopped (SIGTERM, then SIGKILL after 10 s) on exit; every
wait is bounded.
"""
import atexit
import json
import os
import shutil
import subprocess
import tempfile
import time


def scratch_dir(prefix):
    """A new directory under the system's temporary directory, removed when the script exits
    (a bench's records and snapshots are hundreds of MB: left behind, repeated runs fill /tmp)."""
    path = tempfile.mkdtemp(prefix=prefix)
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    return path


def wait_port(path, proc, what, timeout=30.0):
    """The port a process wrote to its --port_file `path`; RuntimeError when `proc` exits first
    or nothing is written within `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode}")
        try:
            with open(path) as f:
                text = f.read().strip()
            if text:
                return int(text)
        except (OSError, ValueError):
            pass
        time.sleep(0.05)
    raise RuntimeError(f"{what} wrote no port file in {timeout} s")


class SluiceCluster:
    def __init__(self, build_dir, num_workers=1, worker_flags=(), coordinator_flags=()):
        self.build_dir = os.path.abspath(build_dir)
        self.num_workers = num_workers
        self.worker_flags = list(worker_flags)
        self.coordinator_flags = list(coordinator_flags)
        self.procs = []
        self.tmp = None
        self.coordinator = None

    def _bin(self, name):
        path = os.path.join(self.build_dir, "bin", name)
        if not os.access(path, os.X_OK):
            raise RuntimeError(f"{path} is missing: build it first "
                               "(cmake --build build --target sluice-coordinator sluice-worker "
                               "sluicectl)")
        return path

    def __enter__(self):
        try:
            return self._start()
        except BaseException:
            self.__exit__(None, None, None)  # stop what did start: no process outlives a failure
            raise

    def _start(self):
        self.tmp = tempfile.TemporaryDirectory(prefix="sluice-bench-")
        log = open(os.path.join(self.tmp.name, "coordinator.log"), "w")
        port_file = os.path.join(self.tmp.name, "coordinator.port")
        p = subprocess.Popen([self._bin("sluice-coordinator"), "--port=0",
                              f"--port_file={port_file}"] + self.coordinator_flags,
                             stdout=log, stderr=log)
        self.procs.append(p)
        self.coordinator = f"127.0.0.1:{wait_port(port_file, p, 'sluice-coordinator')}"
        for w in range(self.num_workers):
            log = open(os.path.join(self.tmp.name, f"worker{w}.log"), "w")
            port_file = os.path.join(self.tmp.name, f"worker{w}.port")
            p = subprocess.Popen([self._bin("sluice-worker"), f"--coordinator={self.coordinator}",
                                  "--port=0", f"--port_file={port_file}"] + self.worker_flags,
                                 stdout=log, stderr=log)
            self.procs.append(p)
            wait_port(port_file, p, f"sluice-worker {w}")
        # Every worker registered and alive before the first job (one task per worker).
        deadline = time.monotonic() + 30
        want = f"{self.num_workers} alive"
        while True:
            out = subprocess.run([self._bin("sluicectl"), "status",
                                  f"--coordinator={self.coordinator}"],
                                 capture_output=True, text=True, timeout=30)
            if want in out.stdout:
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"workers did not register: {out.stdout}{out.stderr}")
            time.sleep(0.1)
        return self

    def __exit__(self, *exc):
        for p in reversed(self.procs):
            if p.poll() is None:
                p.terminate()
        for p in reversed(self.procs):
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        self.procs = []
        if self.tmp is not None:
            self.tmp.cleanup()
        return False

    def bench(self, pipeline, devices="CPU:0", seconds=None, steps=None, warmup_steps=0,
              extra=()):
        """`sluicectl bench --coordinator` on `pipeline`; its JSON result as a dict."""
        return run_sluicectl_bench(self.build_dir, pipeline, devices=devices, seconds=seconds,
                                   steps=steps, warmup_steps=warmup_steps,
                                   extra=[f"--coordinator={self.coordinator}"] + list(extra))


def run_sluicectl_bench(build_dir, pipeline, devices="CPU:0", seconds=None, steps=None,
                        warmup_steps=0, extra=()):
    """`sluicectl bench` (local unless `extra` names a coordinator); its JSON as a dict."""
    cmd = [os.path.join(os.path.abspath(build_dir), "bin", "sluicectl"), "bench",
           f"--pipeline={pipeline}", f"--devices={devices}", f"--warmup_steps={warmup_steps}"]
    if seconds is not None:
        cmd.append(f"--seconds={seconds}")
    if steps is not None:
        cmd.append(f"--steps={steps}")
    cmd += list(extra)
    limit = 120 + (seconds or 0) * 2
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=limit)
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: exit {out.returncode}: {out.stderr.strip()}")
    return json.loads(out.stdout)


def tfrecord_parse_pipeline(build_dir, out_dir):
    """The TFRecord parse pipeline of the benchmarks: `sluicectl gen` writes 4 files of 16384
    records (a 3072-byte image and a label each) to `out_dir`; returns the expression that
    reads them forever, parses each record and batches 256."""
    subprocess.run([os.path.join(os.path.abspath(build_dir), "bin", "sluicectl"), "gen",
                    "--format=tfrecord", f"--out={out_dir}", "--num_files=4",
                    "--records_per_file=16384", "--image_bytes=3072"],
                   check=True, capture_output=True)
    files = sorted(os.path.join(out_dir, f) for f in os.listdir(out_dir))
    flist = ", ".join(f"'{f}'" for f in files)
    return (f"tf_record_dataset([{flist}]).repeat().map(parse_example({{'image': "
            f"FixedLenFeature([], tf.string), 'label': FixedLenFeature([], tf.int64)}}))"
            ".batch(256)")


# The largest constant a pipeline expression carries: the coordinator refuses dataset graphs
# over 16 MiB, and a tf.constant literal is stored whole in the graph.
MAX_CONSTANT_BYTES = 1 << 20


def fixed_size_pipelines(size):
    """(name, Sluice expression, TF expression) of a pipeline whose every step is one uint8
    tensor of `size` bytes: the constant repeated, or, above MAX_CONSTANT_BYTES, a constant of
    MAX_CONSTANT_BYTES batched `size / MAX_CONSTANT_BYTES` times (`size` must then be a
    multiple of it; the batch then copies the bytes once per step, on both sides)."""
    if size <= MAX_CONSTANT_BYTES:
        return (f"fixed {size} B",
                f"from_tensors(tf.constant(0, dtype=tf.uint8, shape=[{size}])).repeat()",
                f"tf.data.Dataset.from_tensors(tf.zeros([{size}], tf.uint8)).repeat()")
    if size % MAX_CONSTANT_BYTES:
        raise ValueError(f"sizes over {MAX_CONSTANT_BYTES} must be multiples of it, got {size}")
    k = size // MAX_CONSTANT_BYTES
    return (f"fixed {size} B ({MAX_CONSTANT_BYTES} B x batch {k})",
            f"from_tensors(tf.constant(0, dtype=tf.uint8, shape=[{MAX_CONSTANT_BYTES}]))"
            f".repeat().batch({k})",
            f"tf.data.Dataset.from_tensors(tf.zeros([{MAX_CONSTANT_BYTES}], tf.uint8))"
            f".repeat().batch({k})")
