"""``MultiHeadAttention``: multi-head attention as a ``flax.nnx`` module (the ``flax`` extra).

One ``nnx.Param`` per weight under :class:`attnkit.MultiHeadParams`' names, initialized
with PyTorch's scheme from the ``params`` stream of ``rngs``; the math is
:func:`attnkit.multi_head_attention`. Dropout draws from the ``dropout`` stream, only when
not ``deterministic`` (``model.eval()`` sets it). It works under ``nnx.jit``,
``nnx.grad`` and with ``nnx.Optimizer``; as pure functions: :mod:`attnkit.backends.jax.mha`.

Shape legend: B batch, L query length, S key length, D ``embed_dim``, Hq/Hkv heads.

.. code-block:: python

    import jax
    from flax import nnx
    from attnkit.backends.jax.flax import MultiHeadAttention

    model = MultiHeadAttention(64, 8, num_kv_heads=2, rope=True, rngs=nnx.Rngs(0))
    x = jax.random.normal(jax.random.key(1), (2, 10, 64))
    out = model(x, is_causal=True)  # (2, 10, 64)

"""

from __future__ import annotations

from typing import Any

from flax import nnx

import attnkit as ak

__all__ = ["MultiHeadAttention"]


class MultiHeadAttention(nnx.Module):
    """Multi-head attention over attnkit's core, as a ``flax.nnx`` module (module docstring).

    Args:
        embed_dim: D, the query width and the output width.
        num_heads: Hq query heads; ``num_kv_heads`` Hkv key/value heads (default Hq).
        kdim, vdim: key and value widths for cross-attention (default D).
        head_dim: per-head size (default D // Hq).
        bias: biases on the four projections. add_bias_kv: a learned key and value
            appended to every sequence.
        is_causal, window, rope: defaults for every call (``rope=True``: :class:`attnkit.Rope`).
        dropout: attention dropout probability, drawn from ``rngs.dropout``.
        dtype: parameter dtype. rngs: ``nnx.Rngs`` with a ``params`` (and, for dropout,
            a ``dropout``) stream.
    """

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        *,
        num_kv_heads: int | None = None,
        kdim: int | None = None,
        vdim: int | None = None,
        head_dim: int | None = None,
        bias: bool = True,
        add_bias_kv: bool = False,
        is_causal: bool = False,
        window: Any = None,
        rope: Any = None,
        dropout: float = 0.0,
        dtype: Any = None,
        rngs: nnx.Rngs,
    ) -> None:
        import jax.numpy as jnp

        self.num_heads = num_heads
        self.num_kv_heads = num_heads if num_kv_heads is None else num_kv_heads
        params = ak.init_multi_head_params(
            embed_dim,
            num_heads,
            rng=rngs.params(),
            num_kv_heads=self.num_kv_heads,
            kdim=kdim,
            vdim=vdim,
            head_dim=head_dim,
            bias=bias,
            add_bias_kv=add_bias_kv,
            dtype=jnp.float32 if dtype is None else dtype,
        )
        for name, value in params._asdict().items():
            setattr(self, name, None if value is None else nnx.Param(value))
        self.is_causal, self.window = is_causal, window
        self.rope = ak.Rope() if rope is True else (rope or None)
        self.dropout = float(dropout)
        self.deterministic = False
        self.rngs = rngs if dropout > 0 else None

    @property
    def params(self) -> ak.MultiHeadParams:
        """The parameters' current values as :class:`attnkit.MultiHeadParams`."""
        values = {
            name: None if getattr(self, name) is None else getattr(self, name)[...]
            for name in ak.MultiHeadParams._fields
        }
        return ak.MultiHeadParams(**values)

    def __call__(
        self,
        query: Any,
        key: Any = None,
        value: Any = None,
        *,
        key_padding_mask: Any = None,
        attn_mask: Any = None,
        is_causal: bool | None = None,
        need_weights: bool = False,
        average_weights: bool = True,
        deterministic: bool | None = None,
        cache: ak.KVCache | None = None,
    ) -> Any:
        """Attention of ``query`` (B, L, D) over ``key`` (B, S, kdim) / ``value``
        (B, S, vdim) (self-attention when None). ``key_padding_mask`` (B, S) and
        ``attn_mask``: bool True = may attend, or additive float. Returns the output
        (B, L, D); with ``need_weights`` or a ``cache``, :class:`attnkit.MultiHeadOutput`
        ``(output, weights (B, L, S) averaged or (B, Hq, L, S), cache)``."""
        off = self.deterministic if deterministic is None else deterministic
        p = 0.0 if off else self.dropout
        result = ak.multi_head_attention(
            query,
            key,
            value,
            self.params,
            num_heads=self.num_heads,
            num_kv_heads=self.num_kv_heads,
            key_padding_mask=key_padding_mask,
            attn_mask=attn_mask,
            is_causal=self.is_causal if is_causal is None else is_causal,
            window=self.window,
            dropout_p=p,
            rng=self.rngs.dropout() if p > 0 else None,
            need_weights=need_weights,
            average_weights=average_weights,
            rope=self.rope,
            cache=cache,
        )
        return result if (need_weights or cache is not None) else result.output
