"""NumPy's block kernel on several threads (attnkit.backends.numpy.threads).

The kernel runs heads (or slices of rows) on as many threads as BLAS was set to use,
holding BLAS at one thread meanwhile. Checked: the threaded kernel against the
sequential one and an independent float64 formula; that BLAS's thread count is held and
then restored, also across concurrent calls and when a task raises; that every task runs
once; that a forked child gets a new pool; and the fallback without threadpoolctl.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest
from _helpers import numpy_attention64
from attnkit.backends.numpy import kernel as fused
from attnkit.backends.numpy import threads

import attnkit as ak
from attnkit.blocked.cost import choose_block_size


def _err(out, ref) -> float:
    return float(np.max(np.abs(out.astype(np.float64) - ref)) / np.max(np.abs(ref)))


@pytest.fixture
def with_threads(monkeypatch):
    """Force the kernel to use ``n`` threads, whatever the machine's BLAS says."""

    def use(n: int) -> None:
        monkeypatch.setattr(fused, "blas_threads", lambda: n)
        monkeypatch.setattr(fused, "MIN_PARALLEL_ELEMENTS", 0)

    return use


@pytest.fixture
def parallel_calls(monkeypatch):
    """The item lists run_parallel was given, per call."""
    calls = []
    original = fused.run_parallel

    def spy(task, items, n):
        calls.append((list(items), n))
        return original(task, items, n)

    monkeypatch.setattr(fused, "run_parallel", spy)
    return calls


@pytest.mark.parametrize("n_threads", [2, 3])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_threaded_equals_sequential_and_reference(with_threads, parallel_calls, n_threads, dtype):
    rng = np.random.default_rng()
    q = rng.standard_normal((2, 3, 130, 16)).astype(dtype)
    k, v = (rng.standard_normal((2, 3, 150, 16)).astype(dtype) for _ in range(2))
    allowed = rng.random((2, 1, 130, 150)) < 0.7
    allowed[0, 0, 5] = False  # a fully masked row
    with_threads(1)
    sequential = ak.scaled_dot_product_attention(q, k, v, attn_mask=allowed)
    assert not parallel_calls
    with_threads(n_threads)
    threaded = ak.scaled_dot_product_attention(q, k, v, attn_mask=allowed)
    assert parallel_calls and all(n == n_threads for _, n in parallel_calls)
    tol = {"float32": 3e-6, "float64": 1e-12}[dtype]
    ref = numpy_attention64(q, k, v, allowed)
    for name, out in (("sequential", sequential), ("threaded", threaded)):
        err = _err(out, ref)
        assert err <= tol, f"{name}: max relative error {err:.3g} > allowed {tol:.2g}"
    assert np.all(threaded[0, 0, 5] == 0)
    diff = _err(threaded, sequential.astype(np.float64))
    assert diff <= tol, f"threaded vs sequential: {diff:.3g} > allowed {tol:.2g}"


def test_one_head_is_split_into_row_slices(with_threads, parallel_calls):
    rng = np.random.default_rng()
    q, k, v = (rng.standard_normal((1, 100, 8)) for _ in range(3))
    with_threads(2)
    out = fused.block_attention(q, k, v, None, 8**-0.5)
    (items, n), *_ = parallel_calls
    assert n == 2 and [(r0, r1) for _, r0, r1 in items] == [(0, 50), (50, 100)]
    err = _err(out, numpy_attention64(q, k, v))
    assert err <= 1e-12, f"max relative error {err:.3g} > allowed 1e-12"


def test_tasks_are_head_major_and_bounded(with_threads, parallel_calls, monkeypatch):
    monkeypatch.setattr(fused, "TASK_ELEMENTS", 64 * 40)  # 40 rows per task at Sk = 64
    monkeypatch.setattr(fused, "MIN_TASK_ROWS", 1)
    rng = np.random.default_rng()
    q = rng.standard_normal((4, 100, 8)).astype("float32")
    k, v = (rng.standard_normal((4, 64, 8)).astype("float32") for _ in range(2))
    with_threads(2)
    fused.block_attention(q, k, v, None, 0.3)
    (items, _), *_ = parallel_calls
    assert items == [((h,), r0, min(r0 + 40, 100)) for h in range(4) for r0 in (0, 40, 80)]


def test_blas_is_held_at_one_thread_then_restored():
    controllers = threads._controllers()
    if not controllers:
        pytest.skip("no BLAS that threadpoolctl can control")
    before = [c.get_num_threads() for c in controllers]
    seen = []

    def task(item):
        seen.append([c.get_num_threads() for c in controllers])

    threads.run_parallel(task, list(range(6)), 2)
    assert len(seen) == 6 and all(counts == [1] * len(controllers) for counts in seen)
    assert [c.get_num_threads() for c in controllers] == before


def test_a_concurrent_call_runs_sequentially_and_the_count_is_restored():
    controllers = threads._controllers()
    before = [c.get_num_threads() for c in controllers]
    started, release = threading.Event(), threading.Event()
    first, second = [], []

    def slow(item):
        first.append(threading.get_ident())
        started.set()
        release.wait()

    holder = threading.Thread(target=threads.run_parallel, args=(slow, [0, 1], 2))
    holder.start()
    try:
        started.wait()
        held = [c.get_num_threads() for c in controllers]
        usable = threads.blas_threads()
        threads.run_parallel(lambda item: second.append(threading.get_ident()), [0, 1, 2], 2)
    finally:
        release.set()
        holder.join()
    assert held == [1] * len(controllers)  # while the first call runs
    assert usable == (min(max(before), threads._cores()) if controllers else 1)  # not 1
    assert second == [threading.get_ident()] * 3  # all on this thread: the cores were busy
    assert len(set(first)) == 2
    assert [c.get_num_threads() for c in controllers] == before


def test_blas_controlled_by_another_thread_means_sequential():
    """threadpoolctl ignores a count set from a thread while another thread controls
    OpenBLAS: the kernel then keeps to one thread rather than compete with BLAS's own."""
    controllers = threads._controllers()
    if not any(hasattr(type(c), "clear_controlling_thread") for c in controllers):
        pytest.skip("no BLAS whose count only one thread may set")
    before = [c.get_num_threads() for c in controllers]
    took, release = threading.Event(), threading.Event()

    def control():
        for c in controllers:
            c.set_num_threads(c.get_num_threads())  # becomes the controlling thread
        took.set()
        release.wait()
        for c in controllers:
            type(c).clear_controlling_thread()

    other = threading.Thread(target=control)
    other.start()
    ran = []
    try:
        took.wait()
        threads.run_parallel(lambda item: ran.append(threading.get_ident()), [0, 1, 2, 3], 2)
    finally:
        release.set()
        other.join()
    assert ran == [threading.get_ident()] * 4
    assert [c.get_num_threads() for c in controllers] == before


@pytest.mark.parametrize("where", ["caller", "worker"])
def test_a_raising_task_propagates_and_restores(where):
    controllers = threads._controllers()
    before = [c.get_num_threads() for c in controllers]
    done = []
    bad = 0 if where == "caller" else 5  # item 0 runs on the caller's thread, 5 on a worker

    def task(item):
        if item == bad:
            raise ValueError(f"task {item} failed")
        done.append(item)

    with pytest.raises(ValueError, match=f"task {bad} failed"):
        threads.run_parallel(task, list(range(6)), 2)
    assert [c.get_num_threads() for c in controllers] == before
    assert sorted(done) == [i for i in range(6) if not (i == bad or (bad == 0 and i < 3))]


def test_every_item_runs_once_across_threads():
    seen, lock = [], threading.Lock()

    def task(item):
        with lock:
            seen.append(item)

    threads.run_parallel(task, list(range(10)), 3)
    assert sorted(seen) == list(range(10))
    assert threads.parts_of(list(range(10)), 3) == [[0, 1, 2], [3, 4, 5], [6, 7, 8, 9]]
    assert threads.parts_of([0], 2) == [[], [0]]


def test_a_forked_child_gets_a_new_pool():
    first = threads._pool(1)
    assert threads._pool(1) is first
    threads._after_fork_in_child()
    assert threads._pool(1) is not first
    assert threads._PARALLEL.acquire(blocking=False)
    threads._PARALLEL.release()


def test_without_threadpoolctl_the_kernel_runs_sequentially(monkeypatch, parallel_calls):
    monkeypatch.setitem(threads._STATE, "controllers", [])
    assert threads.blas_threads() == 1
    rng = np.random.default_rng()
    q, k, v = (rng.standard_normal((8, 512, 32)).astype("float32") for _ in range(3))
    out = ak.scaled_dot_product_attention(q, k, v)
    assert not parallel_calls
    err = _err(out, numpy_attention64(q, k, v))
    assert err <= 3e-6, f"max relative error {err:.3g} > allowed 3e-6"


def test_concurrent_attention_calls(with_threads):
    with_threads(2)
    rng = np.random.default_rng()
    inputs = [
        tuple(rng.standard_normal((4, 200, 16)).astype("float32") for _ in range(3))
        for _ in range(4)
    ]
    results = [None] * 4

    def call(i):
        results[i] = ak.scaled_dot_product_attention(*inputs[i], window=(20, 30))

    workers = [threading.Thread(target=call, args=(i,)) for i in range(4)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    for (q, k, v), out in zip(inputs, results, strict=True):
        i, j = np.arange(200)[:, None], np.arange(200)[None, :]
        err = _err(out, numpy_attention64(q, k, v, (j >= i - 20) & (j <= i + 30)))
        assert err <= 3e-6, f"max relative error {err:.3g} > allowed 3e-6"


def test_block_size_counts_only_the_scores_held():
    """The kernel holds one slice per thread, so the executor's blocks may be larger than
    with all heads' scores in memory, within the same budget."""
    from _helpers import problem

    rng = np.random.default_rng()
    q = rng.standard_normal((1, 8, 4096, 64)).astype("float32")
    p = problem(q, q, q)
    kernels = p.backend.kernels
    assert kernels.block_tasks is not None
    held = choose_block_size(p, (1, 8), kernels)
    every_head = choose_block_size(p, (1, 8), None)
    assert held > every_head, (held, every_head)
