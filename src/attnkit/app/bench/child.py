"""One measurement in a fresh interpreter: the protocol every benchmark worker shares.

The parent runs ``python -m MODULE`` with the job as JSON on stdin; the worker prints its
result as one line, ``MARK`` followed by JSON, on stdout (anything else it prints is
ignored). A fresh process per job gives each its own peak memory and keeps one job's
allocations, threads and compiled programs from timing another's.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

__all__ = ["print_result", "run_module"]


def run_module(
    module: str,
    mark: str,
    payload: Any,
    *,
    env: dict[str, str] | None = None,
    timeout_s: float = 1800.0,
) -> tuple[Any, str | None]:
    """``(result, None)`` from the worker ``module``, or ``(None, why it gave none)``.

    ``payload`` is sent as JSON on stdin; the result is the JSON after ``mark`` on the
    last such line of the worker's stdout. ``why`` names a timeout, a kill (out of
    memory?) or the worker's exit status and last line of stderr.
    """
    try:
        proc = subprocess.run(
            [sys.executable, "-m", module],
            input=json.dumps(payload),
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return None, f"worker timed out after {timeout_s:.0f} s"
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith(mark):
            return json.loads(line[len(mark) :]), None
    why = "killed (out of memory?)" if proc.returncode in (-9, 137) else "gave no result"
    tail = (proc.stderr.strip().splitlines() or [""])[-1][:200]
    return None, f"worker {why}, exit {proc.returncode}: {tail}".rstrip(": ")


def print_result(mark: str, result: Any) -> None:
    """The worker's side: ``result`` as one marked JSON line on stdout."""
    print(mark + json.dumps(result), flush=True)
