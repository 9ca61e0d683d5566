"""The same ring across processes: 2 processes x 2 CPU devices through
``jax.distributed.initialize`` on localhost (how it runs on several hosts), each
comparing its shards of the output and gradients with the single-device core (float64,
1e-12). The processes are started here (jax_ring_worker.py), each with its own
XLA_FLAGS, so this test works whatever this process's device count is."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from _helpers import host_devices_env

pytest.importorskip("jax")

WORKER = Path(__file__).with_name("jax_ring_worker.py")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return int(s.getsockname()[1])


def test_ring_over_two_processes_matches_one_device() -> None:
    port = _free_port()
    env = host_devices_env(2, JAX_PLATFORMS="cpu")
    procs = [
        subprocess.Popen(
            [sys.executable, str(WORKER), str(i), str(port)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(2)
    ]
    results = []
    try:
        for p in procs:
            out, err = p.communicate(timeout=150)
            assert p.returncode == 0, f"worker failed (rc {p.returncode}):\n{err[-3000:]}"
            results.append(json.loads(out.strip().splitlines()[-1]))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    for r in results:
        assert r["devices"] == 4 and r["local_devices"] == 2, r
        assert r["local_shards"] == 8 and not r["nan"], r  # (out, dq, dk, dv) x 2 devices
        assert r["max_error"] <= 1e-12, f"process {r['process']}: error {r['max_error']:.3e}"
    assert results[0]["empty_rows_zero"], "rows with no key are not exactly 0"
