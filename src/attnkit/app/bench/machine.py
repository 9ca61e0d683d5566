"""The machine a benchmark ran on, for its report: CPU, memory, load, library versions."""

from __future__ import annotations

import importlib.metadata
import os
import platform
from pathlib import Path
from typing import Any

from attnkit import __version__

from .worker import HEAP_ONLY_ENV, WORKER_ENV, worker_env

__all__ = ["describe_machine", "load_average", "machine"]

_DISTRIBUTIONS = ("numpy", "torch", "jax", "jaxlib", "array-api-strict", "array-api-compat")


def machine(*, tuned: bool = False) -> dict[str, Any]:
    """The machine and library versions, for the report; ``tuned``: the workers' tuned
    allocator settings (``attnkit bench --tuned-env``)."""
    cpu, mem = platform.processor() or platform.machine(), None
    try:
        info = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
        cpu = next(ln.split(":", 1)[1].strip() for ln in info.splitlines() if "model name" in ln)
        meminfo = Path("/proc/meminfo").read_text(encoding="utf-8").split()
        mem = int(meminfo[meminfo.index("MemTotal:") + 1]) * 1024
    except (OSError, StopIteration, ValueError):
        pass
    versions = {"python": platform.python_version(), "attnkit": __version__}
    for dist in _DISTRIBUTIONS:
        try:
            versions[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_bytes": mem,
        "platform": platform.platform(),
        "load_average": load_average(),  # 1-minute load when the report is made: was it busy?
        "versions": versions,
        "worker_env": {k: v for k, v in worker_env(tuned=tuned).items() if k in WORKER_ENV},
    }


def load_average() -> float | None:
    """The 1-minute load average, None where the system has none."""
    try:
        return round(os.getloadavg()[0], 2)
    except (AttributeError, OSError):  # not on Windows
        return None


def describe_machine(m: dict[str, Any]) -> str:
    """The machine in three lines: CPU and memory, library versions, worker settings."""
    mem = f", {m['memory_bytes'] / 2**30:.0f} GiB" if m["memory_bytes"] else ""
    load = f", load average {m['load_before']} before / {m['load_average']} after"
    load = load if m.get("load_before") is not None else ""
    libs = ", ".join(f"{k} {v}" for k, v in m["versions"].items())
    env = " ".join(f"{k}={v}" for k, v in m.get("worker_env", {}).items())
    heap = " ".join(f"{k}={v}" for k, v in HEAP_ONLY_ENV.items())
    env = (
        f"\nworker processes TUNED (--tuned-env, not what a user gets by default): {env}; "
        f"attnkit's window jobs (growth) also {heap}"
        if env
        else "\nworker processes: the default environment (no allocator tuning)"
    )
    return f"{m['cpu']}, {m['cores']} cores{mem}{load}\n{libs}{env}"
