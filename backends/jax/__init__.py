"""The JAX backend: dropout draws from a PRNG key; each block folds in its stream number;
``jax.checkpoint`` recomputes blocks in the backward pass.

Front-ends: :func:`dot_product_attention` (``nn.py``), a drop-in for
``jax.nn.dot_product_attention``; ``mha`` (multi-head attention as pure functions);
``flax`` (a ``flax.nnx`` module, with Flax installed)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from attnkit.errors import ArgumentTypeError
from attnkit.shapes import type_name

from .. import Backend
from .nn import dot_product_attention

__all__ = ["BACKEND", "JaxBackend", "dot_product_attention"]


def _is_key(rng: Any) -> bool:
    import jax
    import jax.numpy as jnp

    if not isinstance(rng, jax.Array):
        return False
    if jnp.issubdtype(rng.dtype, jax.dtypes.prng_key):
        return rng.shape == ()
    return rng.dtype == jnp.uint32 and rng.shape == (2,)


class JaxBackend(Backend):
    NAME = "jax"
    MODULE = "jax"
    NAMESPACE = "jax.numpy"
    install_hint = 'pip install "attnkit[jax]"  (or: pip install jax)'
    #: The fixed cost of one query block of the generic executor, in score elements of
    #: work (attnkit.blocked.cost; 20,000 by default, from eager PyTorch and NumPy). Under
    #: jax.jit each block is a dozen XLA operations of its own, each dispatched by the
    #: runtime and each compiled: at L = 16384, 8 heads, head size 64, window 256, blocks
    #: of 128 rows ran in 204 ms against 221 ms for blocks of 64 (110 and 109 ms at 8192),
    #: and compiled in 11 s against 22 s. This cost makes 128 rows the choice there (the
    #: best block for a window W is about sqrt(overhead / heads)).
    block_overhead_elements = 131_072

    def from_numpy(self, a: Any, dtype: str, device: Any = None) -> Any:
        import jax.numpy as jnp
        import numpy as np

        return jnp.asarray(np.asarray(a, dtype="float64"), dtype=getattr(jnp, dtype))

    def to_numpy(self, x: Any) -> Any:
        import jax.numpy as jnp
        import numpy as np

        if x.dtype in (jnp.bfloat16, jnp.float16):
            x = x.astype(jnp.float32)
        return np.asarray(x)

    def synchronize(self, x: Any) -> None:
        if hasattr(x, "block_until_ready"):
            x.block_until_ready()

    def check_rng(self, rng: Any, like: Any = None) -> None:
        if not _is_key(rng):
            shape = getattr(rng, "shape", None)
            raise ArgumentTypeError(
                f"rng must be a single JAX PRNG key for JAX arrays, got {type_name(rng)}"
                f"{'' if shape is None else f' of shape {tuple(shape)}'}; create one with "
                "jax.random.key(seed) (split it yourself between calls: JAX keys are not "
                "stateful)."
            )

    def make_rng(self, seed: int) -> Any:
        import jax

        return jax.random.key(seed)

    def dropout_keep(
        self, rng: Any, shape: tuple[int, ...], keep_prob: float, *, like: Any, stream: int
    ) -> Any:
        import jax

        return jax.random.bernoulli(jax.random.fold_in(rng, stream), keep_prob, shape)

    def normal(self, rng: Any, shape: tuple[int, ...], *, dtype: Any, device: Any = None) -> Any:
        """Standard normal draws of ``shape`` from the key ``rng``."""
        import jax

        out = jax.random.normal(rng, shape, dtype)
        return out if device is None else jax.device_put(out, device)

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
        """Uniform draws on ``[low, high)`` of ``shape`` from the key ``rng``."""
        import jax

        out = jax.random.uniform(rng, shape, dtype, low, high)
        return out if device is None else jax.device_put(out, device)

    def split_rng(self, rng: Any, n: int) -> list[Any]:
        """``n`` independent keys (``jax.random.split``)."""
        import jax

        return list(jax.random.split(rng, n))

    def recompute_block(self, fn: Callable[[], Any], *inputs: Any) -> Any:
        """``fn()`` under ``jax.checkpoint`` when traced (under ``jit``/``grad``), so that
        reverse-mode autodiff recomputes the block instead of storing its scores; eagerly
        evaluated blocks run as they are."""
        import jax

        if any(isinstance(x, jax.core.Tracer) for x in inputs):
            return jax.checkpoint(fn)()
        return fn()

    @staticmethod
    def select(
        pred: Any, if_true: Callable[..., Any], if_false: Callable[..., Any], *ops: Any
    ) -> Any:
        """``jax.lax.cond``: one branch runs (under ``vmap`` both, as a select)."""
        import jax

        return jax.lax.cond(pred, if_true, if_false, *ops)

    custom_vjp_replays_dropout = False  # the key would be closed over by the backward

    def custom_vjp(
        self,
        forward: Callable[..., Any],
        backward: Callable[..., Any],
        *arrays: Any,
        random: bool = False,
    ) -> Any:
        """``forward`` and ``backward`` as one ``jax.custom_vjp`` (residuals: the arrays
        and ``saved``; zero cotangents for integer and bool arrays); None for concrete
        arrays, for a call drawing dropout, and where ``jax.closure_convert`` finds the
        forward closing over a differentiated value (its gradient would be lost)."""
        if random and not self.custom_vjp_replays_dropout:
            return None
        import jax

        if not any(isinstance(x, jax.core.Tracer) for x in arrays):
            return None  # concrete arrays: nothing differentiates this call
        needs = tuple(jax.numpy.issubdtype(x.dtype, jax.numpy.inexact) for x in arrays)
        fconv, fconsts = jax.closure_convert(forward, *arrays)
        if fconsts:  # closes over a differentiable value (a score_mod's learned bias):
            return None  # its gradient needs JAX's own autodiff through the executor
        return _custom_vjp_call(fconv, backward, needs, *arrays)

    def replay_rng(self, rng: Any) -> Any:
        """A JAX key is a value: the same key redraws the same numbers."""
        return rng

    map_blocks_loop = "jax.lax.scan over the tiles (lax.dynamic_slice, jax.checkpoint body)"
    map_blocks_recomputes = True

    def map_blocks(
        self,
        body: Callable[..., tuple[Any, ...]],
        starts: Any,
        operands: tuple[Any, ...],
        sizes: tuple[int, ...],
        sums: tuple[tuple[int, int], ...] = (),
        merges: tuple[tuple[int, int], ...] = (),
    ) -> tuple[Any, ...]:
        """``jax.lax.scan`` over the tiles' rows of ``starts`` (a list of int tuples or an
        int array (tiles, entries) computed at run time), each tile's operands cut by
        ``lax.dynamic_slice_in_dim`` and ``body`` under ``jax.checkpoint`` (Rabe & Staats,
        "Self-attention Does Not Need O(n^2) Memory"): the program holds one body and one
        loop whatever the number of tiles, and reverse-mode autodiff recomputes each
        tile's scores rather than storing them. Stacked outputs (tiles, ..., rows, X)
        become (..., tiles * rows, X); merged and summed outputs ride the scan's carry,
        each tile's merged (:func:`attnkit.merge.merge_packed`) or added into its
        rows with ``lax.dynamic_update_slice`` (no per-tile copies)."""
        import jax
        import jax.numpy as jnp

        from attnkit.merge import merge_packed, no_keys

        lax = jax.lax
        step = jax.checkpoint(body)

        def cut(at: Any) -> list[Any]:
            return [
                lax.dynamic_slice_in_dim(x, at[i], n, axis=x.ndim - 2)
                for i, (x, n) in enumerate(zip(operands, sizes, strict=True))
            ]

        at0 = jnp.asarray(starts, dtype=jnp.int32)  # (tiles, entries)
        row0 = tuple(at0[0, c] for c in range(at0.shape[1]))
        shapes = jax.eval_shape(step, row0, *cut(row0))
        folds = (*merges, *sums)  # the carried outputs, in the body's order
        split = len(shapes) - len(folds)
        carry0 = tuple(
            (no_keys(jnp, shape, y.dtype, None) if j < len(merges) else jnp.zeros(shape, y.dtype))
            for j, (y, (_, n)) in enumerate(zip(shapes[split:], folds, strict=True))
            for shape in [(*y.shape[:-2], n, y.shape[-1])]  # (..., n, X)
        )

        def one(carry: tuple[Any, ...], at: Any) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
            row = tuple(at[c] for c in range(at.shape[0]))
            outs = step(row, *cut(row))
            new = []
            for j, (total, (i, _), y) in enumerate(zip(carry, folds, outs[split:], strict=True)):
                lo = row[i]
                held = lax.dynamic_slice_in_dim(total, lo, y.shape[-2], axis=total.ndim - 2)
                both = merge_packed(held, y) if j < len(merges) else held + y
                new.append(lax.dynamic_update_slice_in_dim(total, both, lo, total.ndim - 2))
            return tuple(new), tuple(outs[:split])

        carry, stacked = lax.scan(one, carry0, at0)
        result = []
        for y in stacked:  # (tiles, ..., rows, X) -> (..., tiles * rows, X)
            y = jnp.moveaxis(y, 0, -3)
            result.append(jnp.reshape(y, (*y.shape[:-3], y.shape[-3] * y.shape[-2], y.shape[-1])))
        return (*result, *carry)

    def compile(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """``jax.jit(fn)``: an eager call's one program per signature (attnkit.compiled)."""
        import jax

        return jax.jit(fn)

    def compiles(self, like: Any) -> bool:
        """Whether a call on ``like`` gains from a compiled program: concrete arrays, and
        the tracers of eager autodiff (``jax.grad``, ``jax.vjp``: their primal values
        concrete); not inside ``jax.jit`` or ``vmap`` (one program already)."""
        import jax

        x = like
        while isinstance(x, jax.core.Tracer):
            x = getattr(x, "primal", None)
            if x is None:
                return False
        return True

    def elementwise_grad(self, fn: Callable[[Any], Any], x: Any) -> Any:
        """d fn(x) / dx for an elementwise ``fn``: ``jax.vjp`` with ones."""
        import jax
        import jax.numpy as jnp

        out, pullback = jax.vjp(fn, x)
        (grad,) = pullback(jnp.ones_like(out))
        return grad


BACKEND = JaxBackend()


def _custom_vjp_call(fconv: Any, backward: Any, needs: tuple[bool, ...], *arrays: Any) -> Any:
    """``fconv(*arrays)[0]`` with ``backward`` as its pullback (residuals: the arrays and
    what the forward saved); zero cotangents for the arrays ``needs`` marks False."""
    import functools

    import jax

    @functools.partial(jax.custom_vjp, nondiff_argnums=(0, 1, 2))
    def call(fconv: Any, backward: Any, needs: Any, *arrays: Any) -> Any:
        return fconv(*arrays)[0]

    def fwd(fconv: Any, backward: Any, needs: Any, *arrays: Any) -> Any:
        out, saved = fconv(*arrays)
        return out, (arrays, saved)

    def bwd(fconv: Any, backward: Any, needs: Any, residuals: Any, d_out: Any) -> tuple:
        arrays, saved = residuals
        grads = backward(tuple(arrays), tuple(saved), d_out, needs)
        return tuple(
            _zero_cotangent(x) if g is None else g for g, x in zip(grads, arrays, strict=True)
        )

    call.defvjp(fwd, bwd)
    return call(fconv, backward, needs, *arrays)


def _zero_cotangent(x: Any) -> Any:
    """The zero cotangent of a constant operand (float0 for integer, bool and key arrays)."""
    import jax
    import numpy as np

    dtype = getattr(x, "dtype", None)
    if dtype is not None and jax.numpy.issubdtype(dtype, jax.numpy.inexact):
        return jax.numpy.zeros_like(x)
    return np.zeros(np.shape(x), dtype=jax.dtypes.float0)
