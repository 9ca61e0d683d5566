"""``attnkit bench --approx``'s worker processes: one job per fresh interpreter.

``python -m attnkit.app.bench.approx.worker`` reads a job as JSON on stdin and writes its
measurement as JSON on stdout; :func:`run_job` starts it with ``attnkit bench``'s
allocator settings (:mod:`attnkit.app.bench.worker`), growth jobs with every block
served from glibc's heap.
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict, replace

from ..child import print_result, run_module
from ..worker import worker_env
from .cases import ApproxJob, ApproxMeasurement, Method
from .measure import measure

__all__ = ["main", "run_job"]

_RESULT_MARK = "attnkit-bench-approx-result "


def run_job(job: ApproxJob, *, isolated: bool, timeout_s: float = 1800.0) -> ApproxMeasurement:
    """Measure ``job`` in a fresh interpreter (``isolated``: valid peak memory) or here."""
    if not isolated:
        return replace(measure(job), base_rss_bytes=None, peak_rss_bytes=None)
    data, why = run_module(
        "attnkit.app.bench.approx.worker",
        _RESULT_MARK,
        asdict(job),
        env=worker_env(),  # the caller's environment, as a user's program runs in
        timeout_s=timeout_s,
    )
    if why:
        return ApproxMeasurement(job, error=why)
    return replace(ApproxMeasurement.from_json(data), isolated=True)


def main() -> int:
    """``python -m attnkit.app.bench.approx.worker``: one job as JSON on stdin, its
    measurement out."""
    data = json.loads(sys.stdin.read())
    job = ApproxJob(**{**data, "method": Method(**data["method"])})
    print_result(_RESULT_MARK, measure(job).to_json())
    return 0


if __name__ == "__main__":
    sys.exit(main())
