"""conftest.py - pytest fixtures of the hora Python suite: jobs of N worker
processes on this machine, each started with HORA_CONFIG (a cluster file
written to a temp dir, free ports) and HORA_PROC, exactly as `hora run`
starts them, and stopped by PID at the end.

The package is found through PYTHONPATH (CTest sets <build>/python); a
worker is `python3 tests/python/workers/<script>.py ARGS`, with stdout and
stderr pipes and Python's default buffering (PYTHONUNBUFFERED removed): a
worker flushes what it prints before os._exit.
"""
import os
import random
import secrets
import signal
import socket
import subprocess
import sys
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
WORKERS = os.path.join(HERE, "workers")


def _port_free(port):
    for kind in (socket.SOCK_STREAM, socket.SOCK_DGRAM):
        s = socket.socket(socket.AF_INET, kind)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        finally:
            s.close()
    return True


def free_port_base(n):
    """a base whose ports base+1 .. base+n are free (TCP and UDP), below the
    ephemeral range, random so that parallel suites do not collide"""
    rng = random.Random()
    for _ in range(200):
        base = rng.randrange(20000, 32000 - n - 2)
        if all(_port_free(base + 1 + g) for g in range(n)):
            return base
    raise RuntimeError("no %d free consecutive ports found" % n)


CLUSTER = """\
cluster:
  name: pytest
  launcher: local
  port_base: {base}
  seeds: ["127.0.0.1:{seed}"]
  nodes:
    - host: 127.0.0.1
      workers: {n}
membership:
  probe_interval_ms: 200
  suspect_timeout_ms: 1000
"""


class Job:
    """N processes of one worker script; .wait() gives [(rc, out, err)]"""

    def __init__(self, tmp, n, script, args=(), env=None, train=None):
        base = free_port_base(n)
        self.cluster = os.path.join(str(tmp), "cluster.yaml")
        with open(self.cluster, "w") as f:
            f.write(CLUSTER.format(base=base, seed=base + 1, n=n))
            if train:  # a train section, e.g. "elastic: {min_workers: 1}" (hora.torch.elastic)
                f.write("train:\n  %s\n" % train)
        e = dict(os.environ)
        # Python's own buffering, as under a user's shell: stdout is a pipe
        # here, block-buffered, and a line printed before os._exit without a
        # flush is lost; PYTHONUNBUFFERED=1 (set on some CI machines) would
        # hide that
        e.pop("PYTHONUNBUFFERED", None)
        e["HORA_CONFIG"] = self.cluster
        e["HORA_SECRET"] = secrets.token_hex(16)
        e["HORA_LOG"] = e.get("HORA_LOG", "warn")
        e["PYTHONDONTWRITEBYTECODE"] = "1"
        e["OMP_NUM_THREADS"] = "1"
        if env:
            e.update(env)
        self.n = n
        self.env, self.argv = e, [sys.executable, os.path.join(WORKERS, script)] + [str(a) for a in args]
        self.procs = []
        for g in range(n):
            self.spawn(g)

    def spawn(self, g, env=None):
        """start (again) worker g of the job; appended to .procs"""
        eg = dict(self.env, HORA_PROC=str(g), **(env or {}))
        p = subprocess.Popen(self.argv, env=eg, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True)
        self.procs.append(p)
        return p

    def wait(self, timeout=120):
        deadline = time.monotonic() + timeout
        res = []
        for p in self.procs:
            try:
                out, err = p.communicate(timeout=max(1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self.kill()
                out, err = p.communicate()
                err += "\n[conftest: killed after %d s]" % timeout
            res.append((p.returncode, out, err))
        return res

    def kill(self):
        for p in self.procs:
            if p.poll() is None:
                os.kill(p.pid, signal.SIGKILL)


def report(res):
    return "\n".join("--- worker %d: exit %s\nstdout:\n%s\nstderr:\n%s" % (g, rc, out, err)
                     for g, (rc, out, err) in enumerate(res))


def check_all_ok(res):
    assert all(rc == 0 for rc, _, _ in res), report(res)


@pytest.fixture
def job(tmp_path):
    """job(n, script, *args, env=None, train=None) -> Job; every process is
    killed at the end; train: a line of the cluster file's train section"""
    jobs = []

    def start(n, script, *args, env=None, train=None):
        d = tmp_path / ("job%d" % len(jobs))
        d.mkdir()
        j = Job(d, n, script, args, env, train)
        jobs.append(j)
        return j
    yield start
    for j in jobs:
        j.kill()
        for p in j.procs:
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:
                pass
