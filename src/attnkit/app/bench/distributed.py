"""``attnkit bench --devices N`` and ``--procs N``: ring attention spread over P = 1, 2, 4
... N JAX devices or torch.distributed processes, per-device peak memory and time.

Each framework's benchmark runs in child processes: ``python -m
attnkit.app.bench.sharding_jax`` (N host devices in one process) and ``python -m
attnkit.app.bench.distributed_torch`` (P gloo processes). Causal, zigzag, float32, batch
1, 2 heads of 64; forward, then forward + backward; outputs checked against one device.
Target: at P = 4 each device's peak memory is at most 0.35 x one device's, at L = 32768.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from typing import Any

from ..tables import table

__all__ = ["FULL_LENGTH", "MEMORY_BOUND", "QUICK_LENGTH", "Row", "format_report", "run"]

FULL_LENGTH, QUICK_LENGTH = 32768, 1024
#: Per-device peak at P = 4 over P = 1, forward and backward.
MEMORY_BOUND = 0.35
#: Per-device peak at P = 2 over P = 1 (ideal 0.5; per-process constants add a little):
#: the memory falls as 1 / P from the first split on.
HALF_BOUND = 0.65
HEADS, DIM = 2, 64


@dataclass(frozen=True)
class Row:
    """One (framework, pass, P) measurement."""

    framework: str
    backward: bool
    parts: int
    peak_mib: float | None
    seconds: float | None
    error: float | None
    ok: bool
    note: str = ""


def _counts(n: int) -> list[int]:
    out, p = [], 1
    while p < n:
        out.append(p)
        p *= 2
    return [*out, n]


def _child(args: list[str], env: dict[str, str] | None, timeout_s: float) -> tuple[Any, str]:
    """(the JSON the benchmark printed, or None; why not)."""
    try:
        proc = subprocess.run(
            [sys.executable, "-m", *args], capture_output=True, text=True, env=env,
            timeout=timeout_s, check=False,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        return None, f"timed out after {timeout_s:.0f} s"
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith("{"):
            return json.loads(line), ""
    tail = (proc.stderr.strip().splitlines() or [""])[-1][:200]
    return None, f"exit {proc.returncode}: {tail}"


def _jax(n: int, length: int, backward: bool, repeats: int, timeout_s: float) -> list[Row]:
    env = {**os.environ, "XLA_FLAGS": f"--xla_force_host_platform_device_count={n}"}
    args = ["attnkit.app.bench.sharding_jax", "--devices", str(n), "--length",
            str(length), "--heads", str(HEADS), "--dim", str(DIM), "--repeats",
            str(repeats), "--json", *(["--backward"] if backward else [])]  # fmt: skip
    data, why = _child(args, env, timeout_s)
    if data is None:
        return [Row("jax", backward, p, None, None, None, False, why) for p in _counts(n)]
    rows = []
    for r in data["results"]:
        err = r.get("max_abs_error_vs_1")
        ok = err is None or err <= 1e-4
        rows.append(Row("jax", backward, r["devices"], r["peak_bytes_per_device"] / 2**20,
                        r["median_seconds"], err, ok))  # fmt: skip
    return rows


def _torch(n: int, length: int, backward: bool, repeats: int, timeout_s: float) -> list[Row]:
    rows = []
    for p in _counts(n):
        args = ["attnkit.app.bench.distributed_torch", "--procs", str(p), "--length",
                str(length), "--heads", str(HEADS), "--dim", str(DIM), "--repeats",
                str(repeats), "--json", *(["--backward"] if backward else [])]  # fmt: skip
        data, why = _child(args, None, timeout_s)
        if data is None:
            rows.append(Row("torch", backward, p, None, None, None, False, why))
            continue
        rows.append(Row("torch", backward, p, data["peak_mib"], data["median_s"],
                        data["max_abs_error"], bool(data["ok"])))  # fmt: skip
    return rows


def run(
    framework: str,
    n: int,
    length: int,
    repeats: int,
    *,
    timeout_s: float = 3600.0,
    progress: Any = None,
) -> list[Row]:
    """Forward, then forward + backward, at every P up to ``n`` on ``framework``."""
    measure = _jax if framework == "jax" else _torch
    rows = []
    for backward in (False, True):
        if progress:
            what = "forward + backward" if backward else "forward"
            progress(f"{framework} ring attention, L = {length}, {what}, P up to {n}")
        rows += measure(n, length, backward, repeats, timeout_s)
    return rows


def _verdicts(rows: list[Row], length: int, judged: bool) -> list[str]:
    """One line per framework and pass for each ratio measured: the peak per device at
    P = 4 over P = 1 (the target, :data:`MEMORY_BOUND`) and at P = 2 over P = 1
    (:data:`HALF_BOUND`, printed where P = 2 was measured)."""
    lines = []
    for framework in dict.fromkeys(r.framework for r in rows):
        for backward in (False, True):
            got = {r.parts: r for r in rows if r.framework == framework and r.backward == backward}
            what = "forward + backward" if backward else "forward"
            one = got.get(1)
            for parts, bound in ((4, MEMORY_BOUND), (2, HALF_BOUND)):
                many = got.get(parts)
                if not (one and many and one.peak_mib and many.peak_mib):
                    if parts == 4:
                        lines.append(f"target ring memory  {framework} {what}: P = 4 not measured")
                    continue
                ratio = many.peak_mib / one.peak_mib
                verdict = ("MET" if ratio <= bound else "NOT MET") if judged else "(not judged)"
                lines.append(
                    f"target ring memory  {framework} {what} L={length}: peak per device "
                    f"P={parts} / P=1 = {ratio:.3f}  (bound <= {bound})  {verdict}  "
                    f"{many.peak_mib:.1f} MiB / {one.peak_mib:.1f} MiB"
                )
    return lines


def format_report(rows: list[Row], length: int, judged: bool) -> str:
    """The table (one row per framework, pass and P) and the target's verdict lines."""
    headers = ["framework", "pass", "P", "peak MiB / device", "median s", "max |err|", "check"]
    body = []
    for r in rows:
        body.append([
            r.framework, "fwd+bwd" if r.backward else "forward", str(r.parts),
            "-" if r.peak_mib is None else f"{r.peak_mib:.1f}",
            "-" if r.seconds is None else f"{r.seconds:.3g}",
            "-" if r.error is None else f"{r.error:.2g}",
            "ok" if r.ok else f"FAILED {r.note}".rstrip(),
        ])  # fmt: skip
    lines = [
        f"ring attention, causal, zigzag, float32, L = {length}, 1 x {HEADS} heads x {DIM}; "
        "memory per device is the claim (the devices share this machine's cores)",
        table(headers, body),
        "",
        *_verdicts(rows, length, judged),
    ]
    return "\n".join(lines)
