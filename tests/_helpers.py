"""Helpers shared by the unit tests."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from typing import Any

import numpy as np

__all__ = [
    "PROC_STATUS",
    "host_devices_env",
    "numpy_attention64",
    "printed_int",
    "problem",
    "x64",
]


def numpy_attention64(q: Any, k: Any, v: Any, allowed: Any = None, additive: Any = None) -> Any:
    """Attention in float64 NumPy, the plain formula, for checking the NumPy kernel:
    softmax(q k^T / sqrt(E) + additive, -inf where not ``allowed``) v, 0 on empty rows."""
    q, k, v = (np.asarray(x, dtype=np.float64) for x in (q, k, v))
    s = q @ np.swapaxes(k, -1, -2) / math.sqrt(q.shape[-1])
    if additive is not None:
        s = s + additive
    if allowed is not None:
        s = np.where(allowed, s, -np.inf)
    m = np.max(s, axis=-1, keepdims=True)
    e = np.exp(s - np.where(np.isfinite(m), m, 0.0))
    d = e.sum(axis=-1, keepdims=True)
    return (e @ v) / np.where(d > 0, d, 1.0)


def x64(jax: Any) -> Any:
    """JAX with float64 enabled inside the block, restored afterwards (the JAX backend's
    own switch)."""
    from attnkit.app.bench.peers_jax import float64_enabled

    return float64_enabled()


#: Python source defining ``status(field)``: a field of /proc/self/status in KiB (VmRSS,
#: VmHWM: the peak of this process image, unlike ru_maxrss, which survives exec).
PROC_STATUS = """
def status(field):
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(field))
"""


def printed_int(script: str, *args: str) -> int:
    """The int that ``script`` prints, run with ``args`` in a fresh interpreter whose glibc
    gives freed blocks over 1 MiB back to the system (MALLOC_MMAP_THRESHOLD_), so that
    its resident peak reflects live memory."""
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "1048576"}
    done = subprocess.run(
        [sys.executable, "-c", script, *args], capture_output=True, text=True, env=env, check=True
    )
    return int(done.stdout.strip())


def host_devices_env(n: int, **extra: str) -> dict[str, str]:
    """This process's environment for a JAX subprocess with ``n`` host devices: XLA_FLAGS
    keeps the session's other flags (the test sessions' compile flags) and sets
    ``--xla_force_host_platform_device_count=n`` in place of any device count there."""
    kept = [
        flag
        for flag in os.environ.get("XLA_FLAGS", "").split()
        if not flag.startswith("--xla_force_host_platform_device_count=")
    ]
    flags = " ".join([*kept, f"--xla_force_host_platform_device_count={n}"])
    return {**os.environ, "XLA_FLAGS": flags, **extra}


def problem(query: Any, key: Any, value: Any, **kwargs: Any) -> Any:
    """The validated Problem of a call (``attnkit.call_checks.validate``), keyword arguments
    as in ``scaled_dot_product_attention``."""
    from attnkit.call_checks import validate
    from attnkit.options import Options

    return validate(query, key, value, Options(**kwargs))
