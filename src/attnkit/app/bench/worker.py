"""``attnkit bench``'s worker processes: one job per fresh interpreter, for its peak memory.

``python -m attnkit.app.bench.worker`` reads a job as JSON on stdin and writes the
measurement as JSON on stdout; :func:`run_job` starts it. Workers run in the caller's
environment, as a user's program does. With ``attnkit bench --tuned-env`` they get a
warmed-up allocator instead (:data:`WORKER_ENV`, each variable only where the caller has
not set it: glibc keeps freed memory for reuse and asks for transparent huge pages), the
same for every implementation, and every line of the report says so.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import asdict, replace

from .cases import ATTNKIT_IMPLS, Case, Job, Measurement
from .child import print_result, run_module
from .measure import measure

__all__ = ["HEAP_ONLY_ENV", "WORKER_ENV", "growth_job", "main", "run_job", "worker_env"]

_RESULT_MARK = "attnkit-bench-result "


#: Environment variables every worker process gets unless already set (module docstring).
WORKER_ENV = {
    "MALLOC_TRIM_THRESHOLD_": str(2**30),
    "MALLOC_MMAP_THRESHOLD_": str(2**25),
    "GLIBC_TUNABLES": "glibc.malloc.hugetlb=1",
    "THP_MEM_ALLOC_ENABLE": "1",
}


#: Also set (where unset) for the workers of growth ratios, time(L) / time(L / 2):
#: attnkit's window jobs (target 6) and the growth jobs of ``attnkit bench --approx``.
#: glibc then serves every block from its heap, however large.
#: glibc maps each block of 32 MiB or more afresh and zeroes it on every call, and at
#: batch 1, 8 heads, head size 64 the float32 output is exactly 32 MiB at L = 16384 and
#: 16 MiB (recycled) at 8192: 3 to 5 ms on one side of the ratio only, which is no part of
#: a method's growth (about 5% of a 60 ms call).
HEAP_ONLY_ENV = {"MALLOC_MMAP_MAX_": "0"}


def growth_job(job: Job) -> bool:
    """Whether ``job`` times one side of a growth ratio: attnkit on a window case (the
    baselines and the dense cases, compared with each other, keep glibc's mapping)."""
    return job.case.kind == "window" and job.impl in ATTNKIT_IMPLS


def worker_env(*, tuned: bool = False, heap_only: bool = False) -> dict[str, str]:
    """This process's environment; ``tuned``: with :data:`WORKER_ENV` (and, ``heap_only``,
    :data:`HEAP_ONLY_ENV`) filled in where unset."""
    if not tuned:
        return dict(os.environ)
    return {**WORKER_ENV, **(HEAP_ONLY_ENV if heap_only else {}), **os.environ}


def run_job(
    job: Job, *, isolated: bool, tuned: bool = False, timeout_s: float = 1800.0
) -> Measurement:
    """Measure ``job`` in a fresh interpreter (``isolated``; with the tuned allocator
    settings when ``tuned``) or in this process.

    In this process the memory figures would be this process's peak so far, not the job's,
    so they are dropped.
    """
    if not isolated:
        return replace(measure(job), base_rss_bytes=None, peak_rss_bytes=None)
    data, why = run_module(
        "attnkit.app.bench.worker",
        _RESULT_MARK,
        asdict(job),
        env=worker_env(tuned=tuned, heap_only=growth_job(job)),
        timeout_s=timeout_s,
    )
    if why:
        return Measurement(job, error=why)
    return replace(Measurement.from_json(data), isolated=True)


def main() -> int:
    """``python -m attnkit.app.bench.worker``: one job as JSON on stdin, its measurement
    on stdout."""
    data = json.loads(sys.stdin.read())
    job = Job(**{**data, "case": Case(**data["case"])})
    print_result(_RESULT_MARK, measure(job).to_json())
    return 0


if __name__ == "__main__":
    sys.exit(main())
