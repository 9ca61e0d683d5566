"""What the math asks of an array library's backend: the half of the backend protocol the
math calls.

:class:`MathBackend`: the namespace, explicit generators, autodiff hooks, the loop over
blocks and :class:`Kernels`, the optional fast paths; its defaults serve any array-API
library without autodiff. The tools' half: ``attnkit.backends.protocol``.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

from .errors import ArgumentTypeError
from .shapes import type_name

__all__ = ["BlockTasks", "Kernels", "MathBackend"]


class BlockTasks(NamedTuple):
    """A block kernel that computes a block in tasks, one head's slice of rows each, one
    task per thread at a time: ``threads`` at once, a task at most ``task_elements``
    scores and at least ``min_task_rows`` rows. The figures of one call (the thread count
    may change between calls)."""

    threads: int
    task_elements: int
    min_task_rows: int

    def held(self, rows: int, width: int, heads: int) -> int:
        """Score elements held at once for a block of ``rows`` x ``width`` keys over
        ``heads``: every thread's task, or the whole block where it is smaller::

            min(rows * heads, threads * min(rows, task rows)) * width
            task rows = max(min_task_rows, task_elements // width)
        """
        task = max(self.min_task_rows, self.task_elements // max(width, 1))
        return min(rows * heads, self.threads * min(rows, task)) * width


@dataclass(frozen=True)
class Kernels:
    """A backend's optional fast paths. Each kernel is a leaf: it takes arrays and plain
    arguments, never attnkit's internal objects, imports nothing of the executor, and
    returns None where it does not apply (the generic path then runs). The math decides
    where the semantics allow a kernel; the kernel decides what its framework can do.

    ``attention(query, key, value, *, mask, causal, scale, gqa)``
        the whole call in the caller's layout: query (..., Hq, L, E), key (..., Hkv, S, E),
        value (..., Hkv, S, Ev), ``mask`` None or an array broadcastable to
        (..., Hq, L, S) (bool True = may attend, or additive float), ``causal`` top-left
        with the diagonal at position 0, ``gqa`` grouped-query heads (Hq % Hkv == 0).
        Returns (..., Hq, L, Ev) in the inputs' dtype, or None. Offered only calls with
        no dropout, weights, lse or score_mod, no window or structured mask that leaves
        out a pair, and L, S > 0.
    ``attention_declines(query, key, value, *, mask, causal, scale, gqa)``
        why ``attention`` would decline this call before computing anything (a string),
        or None: read by :func:`attnkit.explain`.
    ``attention_plan(query, key, value, *, causal, scale, gqa)``
        for a call without mask that ``attention`` takes: a function of
        (query, key, value) for later calls of the same signature (types, shapes, dtypes,
        devices, scalars), returning the output or None where a call's values need the
        generic path; or None.
    ``block(q, k, v, mask, scale, shift_free)``
        one block of the executor: q (..., Bq, E), k (..., Sk, E), v (..., Sk, Ev), mask
        bool, additive or None, all broadcastable in their leading dims; ``shift_free``:
        every score is small enough for exp without the row max (read where
        ``block_reads_shift_free``). Returns out (..., Bq, Ev) or None.
    ``run(q, k, v, mask, scale, rows)``
        every block of a run of translated blocks (:mod:`attnkit.blocked.translated_runs`)
        in one call: q (..., n*rows, E), k and v (..., (n-1)*rows + width, E|Ev), mask
        (rows, width) bool or None. Returns (..., n*rows, Ev) or None.
    ``run_rows``                      query rows per block of a run.
    ``block_masks_nonfinite``         the block kernel replaces masked scores (never adds
                                      -inf) and keeps a masked pair's NaN or inf value out
                                      of its product (or declines), so neither can leak;
                                      else the executor gives it only inputs checked finite.
    ``block_reads_shift_free``        the executor decides the shift-free bound for it.
    ``block_overhead_per_head``       its fixed cost per head of a block, in score
                                      elements of work (for the choice of block size).
    ``block_tasks()``                 how it holds a block's scores (:class:`BlockTasks`,
                                      for the executor's memory budget; read at most
                                      once per call), or None: all of them at once.
    ``block_wants_additive``          the block and run kernels take masks in additive
                                      form (0 / -inf in the compute dtype), which the
                                      executor makes once per tile.
    ``block_lse(q, k, v, mask, scale)``, ``run_lse(q, k, v, mask, scale, rows)``
        as ``block`` and ``run``, returning (out, lse (..., rows)), lse -inf on rows with
        no allowed key; or None. What a forward saving for the backward pass runs.
    ``block_backward(d_out, q, k, v, out, lse, mask, scale)``
        (dq, dk, dv) of a block from its output and lse (a fused backward pass, the
        scores never stored); or None.
    ``run_backward(d_out, q, k, v, out, lse, mask, scale, rows)``
        the same for a run of n blocks of ``rows`` (a window's interior), block i reading
        keys [i*rows, (i + c)*rows) of k and v (..., (n + c - 1)*rows, E|Ev), ``mask``
        (rows, c*rows) the same for every block; or None.
    """

    attention: Callable[..., Any] | None = None
    attention_declines: Callable[..., str | None] | None = None
    attention_plan: Callable[..., Any] | None = None
    block: Callable[..., Any] | None = None
    run: Callable[..., Any] | None = None
    run_rows: int = 0
    block_masks_nonfinite: bool = False
    block_reads_shift_free: bool = False
    block_overhead_per_head: int = 0
    block_tasks: Callable[[], BlockTasks] | None = None
    block_wants_additive: bool = False
    block_lse: Callable[..., Any] | None = None
    run_lse: Callable[..., Any] | None = None
    block_backward: Callable[..., Any] | None = None
    run_backward: Callable[..., Any] | None = None


class MathBackend:
    """What the math calls: the defaults serve any array-API library without autodiff.

    Attributes:
        NAME: the backend's name (``attnkit.backends.NAMES``), for messages.
        NAMESPACE: the import name of its array-API namespace (``namespace()``).
        kernels: the optional fast paths (:class:`Kernels`; none by default).
        block_overhead_elements: the fixed cost of one executor block in score elements
            of work, or None for the executor's default (JAX under ``jax.jit`` declares
            more: each block is a dozen XLA operations of its own).

    Methods:
        namespace(): its array-API namespace.
        concrete_float(x): the Python float of a 0-d array; raises TypeError, ValueError
            or RuntimeError where the value is not concrete (traced under ``jax.jit``).
        check_rng(rng, like=None), split_rng(rng, n): the backend's explicit generators
            (NumPy ``Generator``, ``torch.Generator``, JAX key); ``check_rng`` raises
            ``attnkit.ArgumentTypeError`` unless ``rng`` is one that can draw for
            ``like``'s device.
        dropout_keep(rng, shape, keep_prob, *, like, stream): a bool array of ``shape``
            on ``like``'s device, each element True with probability ``keep_prob``;
            ``stream`` numbers the draws of one call (functional keys fold it in).
        normal(rng, shape, *, dtype, device=None), uniform(rng, shape, low, high, ...):
            random draws (NumPy and array-api-strict draw in float64 and cast, so they
            agree for one seed).
        replay_rng(rng): an independent generator that draws what ``rng`` would draw
            next (a copy of its state; a JAX key is itself), so that a backward pass
            redraws the forward pass's dropout pattern without storing it.
        foreign_mask(obj): a framework's own mask object (PyTorch's ``CausalBias``) as
            ``(attnkit.masks mask, (L, S))``, or None.
        recompute_block(fn, *inputs): ``fn()`` run so that autodiff recomputes it in the
            backward pass when ``inputs`` are being differentiated; None (the default)
            for libraries without autodiff.
        select(pred, if_true, if_false, *operands): ``if_true(*operands)`` where the
            traced 0-d bool ``pred`` is True at run time, else ``if_false(*operands)``,
            running one branch only (``jax.lax.cond``: a tile skipped by its kind); None
            (the default) where the library has no such control flow, and the math then
            takes the safe branch.
        custom_vjp(forward, backward, *arrays, random): ``forward(*arrays)[0]`` wired
            into the framework's autodiff with the math's own backward pass:
            ``forward(*arrays) -> (out, saved)`` (saved: a tuple of arrays) and
            ``backward(arrays, saved, d_out, needs) -> grads`` (one per array, None where
            ``needs`` says none is wanted). Returns the output, or None where the call is
            not being differentiated (or ``random``, a call drawing dropout, cannot be
            replayed); None (the default) for libraries without autodiff.
        elementwise_grad(fn, x): the derivative of the elementwise ``fn`` at ``x``
            (``d fn(x) / dx``, of x's shape) by the framework's autodiff, or None (the
            default) for libraries without one.
        map_blocks(body, starts, operands, sizes, sums=(), merges=()): the loop over
            the tile table (:mod:`attnkit.blocked.loop` states the contract): for each
            tile b, ``body(starts[b], *slices)`` on the slices ``x[..., starts[b][i] :
            starts[b][i] + sizes[i], :]`` of ``operands[i]`` (axis -2; the entries of
            ``starts[b]`` after the operands' are the body's own: a stream, a kind),
            returning a tuple of arrays (..., rows, X). The first outputs come back
            stacked, every tile's concatenated on axis -2 in order; the next
            ``len(merges)`` are pieces of attention packed [acc | m | l]
            (..., rows, Ev + 2), each merged into its rows of an (..., n, Ev + 2) array
            that starts as attention over no key (:func:`attnkit.merge.merge_packed`, the
            online softmax); the last ``len(sums)`` are added into their rows of a zero
            (..., n, X) array (key gradients). ``starts`` is a list of int tuples, or an
            int array (tiles, entries) computed at run time (a tile's kind read from a
            mask's data). None (the default): the math's own Python loop (NumPy,
            array-api-strict, eager PyTorch: :func:`attnkit.blocked.loop.python_loop`);
            JAX declares ``jax.lax.scan`` with ``lax.dynamic_slice`` and
            ``jax.checkpoint`` on the body, so that a jitted program holds the body once,
            whatever the number of tiles.
            ``map_blocks_loop`` names the loop (:func:`attnkit.explain`) and
            ``map_blocks_recomputes`` says whether autodiff recomputes the body in the
            backward pass rather than storing its scores.
    """

    NAME: str = "generic"
    NAMESPACE: str = ""
    kernels: Kernels = Kernels()
    block_overhead_elements: int | None = None
    #: ``recompute_block(fn, *inputs)`` where the framework has autodiff, else None.
    recompute_block: Callable[..., Any] | None = None
    #: ``select(pred, if_true, if_false, *operands)`` where traced programs branch.
    select: Callable[..., Any] | None = None
    #: ``custom_vjp(forward, backward, *arrays, random)`` where the framework has autodiff.
    custom_vjp: Callable[..., Any] | None = None
    #: whether ``custom_vjp`` takes calls that draw dropout (it redraws their pattern).
    custom_vjp_replays_dropout: bool = True
    #: the loop over tiles (see the class docstring), or None.
    map_blocks: Callable[..., tuple[Any, ...]] | None = None
    #: ``compile(fn)``: ``fn`` as one compiled program (``jax.jit``), or None where calls
    #: run as they are (:mod:`attnkit.compiled`); ``compiles(like)`` says whether a call on
    #: arrays like ``like`` gains from it (not inside the compiler's own trace).
    compile: Callable[[Callable[..., Any]], Callable[..., Any]] | None = None

    def compiles(self, like: Any) -> bool:
        return self.compile is not None

    #: ``traced_call(query, key, value, options)``: while the framework's compiler traces
    #: (``torch.compile``), the whole call as one operator of its graph, or None where the
    #: call is traced as it is; None (the default) where the framework has none.
    traced_call: Callable[..., Any] | None = None
    #: the loop ``map_blocks`` runs, in words (``attnkit.explain`` prints it).
    map_blocks_loop: str = "a Python loop over the blocks"
    #: whether autodiff recomputes ``map_blocks``'s body rather than storing its scores.
    map_blocks_recomputes: bool = False

    #: ``concrete_float(x)``: the builtin ``float`` (a C call, no Python frame on the
    #: hot path), which a backend overrides where its arrays need more (PyTorch's detach).
    concrete_float: Callable[[Any], float] = staticmethod(float)

    def namespace(self) -> Any:
        if not self.NAMESPACE:
            raise NotImplementedError(f"the {self.NAME} backend names no namespace")
        return importlib.import_module(self.NAMESPACE)

    def check_rng(self, rng: Any, like: Any = None) -> None:
        raise ArgumentTypeError(
            f"attnkit has no random numbers for {type_name(like)} arrays (no backend adapter "
            "for their namespace): dropout needs one."
        )

    def split_rng(self, rng: Any, n: int) -> list[Any]:
        raise NotImplementedError(f"the {self.NAME} backend has no random numbers")

    def dropout_keep(
        self, rng: Any, shape: tuple[int, ...], keep_prob: float, *, like: Any, stream: int
    ) -> Any:
        raise NotImplementedError(f"the {self.NAME} backend has no random numbers")

    def normal(self, rng: Any, shape: tuple[int, ...], *, dtype: Any, device: Any = None) -> Any:
        raise NotImplementedError(f"the {self.NAME} backend has no random numbers")

    def uniform(
        self,
        rng: Any,
        shape: tuple[int, ...],
        low: float,
        high: float,
        *,
        dtype: Any,
        device: Any = None,
    ) -> Any:
        raise NotImplementedError(f"the {self.NAME} backend has no random numbers")

    def replay_rng(self, rng: Any) -> Any:
        import copy

        return copy.deepcopy(rng)

    def foreign_mask(self, obj: Any) -> Any:
        return None

    def elementwise_grad(self, fn: Callable[[Any], Any], x: Any) -> Any:
        return None
