"""Parallel work for NumPy's block kernel: threads across heads instead of inside BLAS.

Whole heads run on separate threads, each product single-threaded, as many as BLAS was
set to use (``OPENBLAS_NUM_THREADS``, ``threadpoolctl``). While a block runs, BLAS is held
at one thread (through ``threadpoolctl``) and then restored; one block runs in parallel
at a time, and a concurrent call runs its block sequentially. Without ``threadpoolctl``,
or with BLAS at one thread, the kernel is sequential.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

__all__ = [
    "MIN_PARALLEL_ELEMENTS",
    "blas_threads",
    "parts_of",
    "run_parallel",
    "single_threaded_blas",
]

#: below this many score elements per block (about 1.5 ms of work) threads cost more
#: than they save, and the block runs sequentially
MIN_PARALLEL_ELEMENTS = 2**20

_LOCK = threading.Lock()  # guards the pool
_PARALLEL = threading.Lock()  # held by the one parallel block running
_STATE: dict[str, Any] = {"controllers": None, "saved": None, "pool": None}


def _controllers() -> list[Any]:
    """threadpoolctl's controllers of the BLAS libraries loaded (found once); [] without it."""
    if _STATE["controllers"] is None:
        import numpy  # noqa: F401  (its BLAS must be loaded to be found)

        try:
            from threadpoolctl import ThreadpoolController
        except ImportError:
            _STATE["controllers"] = []
        else:
            _STATE["controllers"] = list(
                ThreadpoolController().select(user_api="blas").lib_controllers
            )
    return _STATE["controllers"]


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def blas_threads() -> int:
    """How many threads the block kernel may use: the BLAS thread count (as it was before
    a parallel block held it at one), at most the usable cores; 1 without
    ``threadpoolctl`` or a BLAS it can control."""
    controllers = _controllers()
    if not controllers:
        return 1
    saved = _STATE["saved"]  # set while a parallel block runs
    counts = saved if saved is not None else [c.get_num_threads() for c in controllers]
    return max(1, min(max(counts), _cores()))


@contextmanager
def single_threaded_blas() -> Iterator[bool]:
    """Hold every BLAS library at one thread inside the block, then restore its count,
    both from the calling thread. Yields whether the hold took effect: threadpoolctl
    lets only one thread at a time set OpenBLAS's process-wide count, and a request from
    any other is ignored. Only for the holder of ``_PARALLEL``."""
    controllers = _controllers()
    _STATE["saved"] = [c.get_num_threads() for c in controllers]
    try:
        for c in controllers:
            c.set_num_threads(1)
        yield all(c.get_num_threads() == 1 for c in controllers)
    finally:
        for c, n in zip(controllers, _STATE["saved"], strict=True):
            c.set_num_threads(n)
            release = getattr(type(c), "clear_controlling_thread", None)
            if release is not None:  # threadpoolctl >= 3.6: let other threads set it again
                release()
        _STATE["saved"] = None


def _pool(workers: int) -> ThreadPoolExecutor:
    """A pool of at least ``workers`` threads, made once (and anew in a forked child)."""
    with _LOCK:
        pool, size = _STATE["pool"] or (None, 0)
        if pool is None or size < workers:
            pool = ThreadPoolExecutor(workers, thread_name_prefix="attnkit-numpy")
            _STATE["pool"] = (pool, workers)
    return pool


def _after_fork_in_child() -> None:
    """A forked child has only the forking thread: the parent's pool has no threads
    behind it and a lock may have been held by another thread."""
    global _LOCK, _PARALLEL
    _LOCK, _PARALLEL = threading.Lock(), threading.Lock()
    _STATE["pool"] = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def run_parallel(task: Callable[[Any], None], items: Sequence[Any], threads: int) -> None:
    """``task(item)`` for every item, each of ``threads`` threads (the caller's is one)
    taking a contiguous run of them, BLAS single-threaded meanwhile. Exceptions are
    raised here, after every thread has finished. While another call runs in parallel
    (its threads already use the cores), the items run here, one after another."""

    def share(part: Sequence[Any]) -> None:
        for item in part:
            task(item)

    if not _PARALLEL.acquire(blocking=False):
        share(items)
        return
    try:
        _parallel(share, parts_of(items, threads))
    finally:
        _PARALLEL.release()


def parts_of(items: Sequence[Any], threads: int) -> list[Sequence[Any]]:
    """``items`` cut into ``threads`` contiguous runs of nearly equal length."""
    n = len(items)
    return [items[n * i // threads : n * (i + 1) // threads] for i in range(threads)]


def _parallel(share: Callable[[Sequence[Any]], None], parts: list[Sequence[Any]]) -> None:
    threads = len(parts)
    with single_threaded_blas() as held:
        if not held:  # BLAS keeps its threads: ours would only compete with them
            for part in parts:
                share(part)
            return
        pool = _pool(threads - 1)
        futures: list[Future[None]] = [pool.submit(share, part) for part in parts[1:]]
        try:
            share(parts[0])
        finally:
            errors = [f.exception() for f in futures]  # waits for each
        for error in errors:
            if error is not None:
                raise error
