"""``attnkit bench --approx``'s worker processes: one job per fresh interpreter.

``python -m attnkit.app.bench.approx.worker`` reads a job as JSON on stdin and writes its
measurement as JSON on stdout; :func:`run_job` starts it with ``attnkit bench``'s
allocator settings (:mod:`attnkit.app.bench.worker`), growth jobs with every block
served from glibc's heap.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import asdict, replace

from ..worker import worker_env
from .cases import ApproxJob, ApproxMeasurement, Method
from .measure import measure

__all__ = ["main", "run_job"]

_RESULT_MARK = "attnkit-bench-approx-result "


def run_job(job: ApproxJob, *, isolated: bool, timeout_s: float = 1800.0) -> ApproxMeasurement:
    """Measure ``job`` in a fresh interpreter (``isolated``: valid peak memory) or here."""
    if not isolated:
        return replace(measure(job), base_rss_bytes=None, peak_rss_bytes=None)
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "attnkit.app.bench.approx.worker"],
            input=json.dumps(asdict(job)),
            env=worker_env(),  # the caller's environment, as a user's program runs in
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return ApproxMeasurement(job, error=f"worker timed out after {timeout_s:.0f} s")
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith(_RESULT_MARK):
            data = json.loads(line[len(_RESULT_MARK) :])
            return replace(ApproxMeasurement.from_json(data), isolated=True)
    tail = (proc.stderr.strip().splitlines() or [""])[-1][:200]
    return ApproxMeasurement(job, error=f"worker gave no result, exit {proc.returncode}: {tail}")


def main() -> int:
    """``python -m attnkit.app.bench.approx.worker``: one job as JSON on stdin, its
    measurement out."""
    data = json.loads(sys.stdin.read())
    job = ApproxJob(**{**data, "method": Method(**data["method"])})
    print(_RESULT_MARK + json.dumps(measure(job).to_json()), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
