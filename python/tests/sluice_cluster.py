"""A Sluice cluster of real processes on loopback for the Python tests: one sluice-coordinator
and N sluice-worker from $SLUICE_BUILD_DIR/bin, each on --port=0 with a --port_file, as
tests/integration/process_cluster.cc starts them.

Every wait is bounded; stop() (and the context manager) SIGTERMs, then SIGKILLs what is left,
so a failed test leaves no process behind.
"""

import os
import signal
import subprocess
import tempfile
import time

BUILD_DIR = os.environ.get(
    "SLUICE_BUILD_DIR", os.path.join(os.path.dirname(__file__), "..", "..", "build"))


def _wait_port(path, proc, name, timeout=30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError("%s exited with %s: %s" % (name, proc.returncode, _stderr(proc)))
        try:
            with open(path) as f:
                text = f.read().strip()
            if text:
                return int(text)
        except FileNotFoundError:
            pass
        time.sleep(0.02)
    raise RuntimeError("%s wrote no port file within %ss" % (name, timeout))


def _stderr(proc):
    try:
        with open(proc.stderr_path) as f:
            return f.read()[-2000:]
    except OSError:
        return ""


class Cluster:
    def __init__(self, num_workers=2, worker_flags=(), coordinator_flags=()):
        self.dir = tempfile.mkdtemp(prefix="sluice-pytest-")
        self._procs = []
        self.worker_flags = list(worker_flags)
        port_file = os.path.join(self.dir, "coordinator.port")
        self._coordinator = self._start(
            [os.path.join(BUILD_DIR, "bin", "sluice-coordinator"), "--port=0",
             "--port_file=" + port_file, "--worker_timeout=10s"] + list(coordinator_flags),
            "coordinator")
        port = _wait_port(port_file, self._coordinator, "sluice-coordinator")
        self.coordinator = "127.0.0.1:%d" % port
        self.workers = []
        for _ in range(num_workers):
            self.add_worker()

    def _start(self, argv, name):
        err = os.path.join(self.dir, name + ".stderr")
        with open(err, "w") as f:
            proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=f)
        proc.stderr_path = err
        self._procs.append(proc)
        return proc

    def add_worker(self):
        i = len(self.workers)
        port_file = os.path.join(self.dir, "worker-%d.port" % i)
        proc = self._start(
            [os.path.join(BUILD_DIR, "bin", "sluice-worker"), "--coordinator=" + self.coordinator,
             "--port=0", "--port_file=" + port_file, "--heartbeat_interval=100ms",
             "--drain_timeout=5s"] + self.worker_flags, "worker-%d" % i)
        _wait_port(port_file, proc, "sluice-worker %d" % i)
        self.workers.append(proc)
        return proc

    def pause_worker(self, i):
        """SIGSTOP: a hung worker."""
        self.workers[i].send_signal(signal.SIGSTOP)

    def continue_worker(self, i):
        self.workers[i].send_signal(signal.SIGCONT)

    def stop(self):
        for p in self.workers:
            if p.poll() is None:
                p.send_signal(signal.SIGCONT)
        for p in reversed(self._procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self._procs:
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=15)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()
