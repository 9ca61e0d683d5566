"""``MultiheadAttention``: a drop-in ``torch.nn.MultiheadAttention`` over attnkit's core.

The math is :func:`attnkit.multi_head_attention`; the module holds the ``nn.Parameter``s
under torch's names, converts torch's conventions (:mod:`.inputs`) and draws dropout
from a ``torch.Generator``. Shape legend: B batch, L target length, S source length,
D ``embed_dim``, Hq/Hkv heads.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

import attnkit as ak
from attnkit.checks import check_flag
from attnkit.errors import ArgumentTypeError, ParameterError, ShapeError
from attnkit.multi_head.params import check_heads

from .fit import autocast_dtype, cast_params, from_nested, to_nested
from .inputs import (
    batched_masks,
    check_forward,
    check_torch_mask,
    check_width,
    from_torch_mask,
)
from .multihead_params import module_params, reset_parameters
from .sdpa import dropout_generator

__all__ = ["MultiheadAttention"]


class MultiheadAttention(nn.Module):
    """A drop-in ``torch.nn.MultiheadAttention`` whose math is attnkit's core.

    Same constructor arguments, parameter names (its ``state_dict`` loads), forward
    signature, conventions (``key_padding_mask`` and bool ``attn_mask``: True = NOT
    allowed) and return values ``(attn_output, attn_weights)``. Differences: a fully
    masked row gives 0 instead of NaN; ``is_causal=True`` works without an ``attn_mask``.

    Extra keyword-only arguments: ``num_kv_heads`` (GQA/MQA; the packed
    ``in_proj_weight`` is then ((Hq + 2 Hkv) * D/Hq, D)), ``rope`` (True or an
    :class:`attnkit.Rope`), ``window`` (sliding window, as attnkit's core),
    ``is_causal`` (default for every call), ``generator`` (a ``torch.Generator`` for
    dropout; default: seeded from torch's global RNG). :meth:`init_cache` and
    :meth:`decode` run incremental self-attention decoding with a kv cache.
    """

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        dropout: float = 0.0,
        bias: bool = True,
        add_bias_kv: bool = False,
        add_zero_attn: bool = False,
        kdim: int | None = None,
        vdim: int | None = None,
        batch_first: bool = False,
        device: Any = None,
        dtype: Any = None,
        *,
        num_kv_heads: int | None = None,
        rope: Any = None,
        window: Any = None,
        is_causal: bool = False,
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__()
        if embed_dim <= 0 or num_heads <= 0 or embed_dim % num_heads:
            raise ParameterError(
                f"embed_dim={embed_dim} must be divisible by num_heads={num_heads} (both > 0)."
            )
        if not isinstance(dropout, (int, float)) or not 0.0 <= dropout < 1.0:
            raise ParameterError(f"dropout must be a probability in [0, 1), got {dropout!r}.")
        self.embed_dim, self.num_heads = embed_dim, num_heads
        self.num_kv_heads = num_heads if num_kv_heads is None else num_kv_heads
        check_heads(num_heads, self.num_kv_heads)
        self.kdim = embed_dim if kdim is None else kdim
        self.vdim = embed_dim if vdim is None else vdim
        self._packed = self.kdim == embed_dim and self.vdim == embed_dim  # one in_proj_weight
        self.head_dim = embed_dim // num_heads
        self.dropout, self.batch_first, self.add_zero_attn = (
            float(dropout),
            batch_first,
            add_zero_attn,
        )
        self.rope = ak.Rope() if rope is True else (rope or None)
        self.window, self.is_causal, self.generator = window, is_causal, generator
        kw = {"device": device, "dtype": dtype}
        rq, rk = num_heads * self.head_dim, self.num_kv_heads * self.head_dim
        if self._packed:
            self.in_proj_weight = nn.Parameter(torch.empty((rq + 2 * rk, embed_dim), **kw))
            self.register_parameter("q_proj_weight", None)
            self.register_parameter("k_proj_weight", None)
            self.register_parameter("v_proj_weight", None)
        else:
            self.q_proj_weight = nn.Parameter(torch.empty((rq, embed_dim), **kw))
            self.k_proj_weight = nn.Parameter(torch.empty((rk, self.kdim), **kw))
            self.v_proj_weight = nn.Parameter(torch.empty((rk, self.vdim), **kw))
            self.register_parameter("in_proj_weight", None)
        if bias:
            self.in_proj_bias = nn.Parameter(torch.empty(rq + 2 * rk, **kw))
        else:
            self.register_parameter("in_proj_bias", None)
        self.out_proj = nn.Linear(rq, embed_dim, bias=bias, **kw)
        if add_bias_kv:
            self.bias_k = nn.Parameter(torch.empty((1, 1, rk), **kw))
            self.bias_v = nn.Parameter(torch.empty((1, 1, rk), **kw))
        else:
            self.bias_k = self.bias_v = None
        self._reset_parameters()

    def _reset_parameters(self) -> None:
        """PyTorch's scheme through :func:`attnkit.init_multi_head_params`."""
        reset_parameters(self)

    @property
    def _qkv_same_embed_dim(self) -> bool:
        """Read by ``nn.TransformerEncoder``/``TransformerEncoderLayer`` to choose torch's
        native fused layer, which would take this module's weights and bypass attnkit (and
        GQA, RoPE and windows with it); False keeps them on the path that calls
        :meth:`forward`. (Whether the projections are packed is ``_packed``.)"""
        return False

    @property
    def params(self) -> ak.MultiHeadParams:
        """The parameters as :class:`attnkit.MultiHeadParams` (views, autograd intact)."""
        return module_params(self)

    def _batched(self, x: torch.Tensor | None) -> torch.Tensor | None:
        """(B, N, D) whatever ``batch_first`` says."""
        if x is None or self.batch_first:
            return x
        return x.transpose(0, 1)  # (N, B, D) -> (B, N, D)

    def forward(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        key_padding_mask: torch.Tensor | None = None,
        need_weights: bool = True,
        attn_mask: torch.Tensor | None = None,
        average_attn_weights: bool = True,
        is_causal: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """As ``torch.nn.MultiheadAttention.forward``: inputs (L, B, D) or, with
        ``batch_first``, (B, L, D), or unbatched (L, D); returns ``(attn_output,
        attn_weights)`` with weights (B, L, S) averaged or (B, Hq, L, S), or None.

        Under ``torch.autocast`` the inputs and parameters are cast to its dtype, as torch's
        module computes; a nested-tensor query (``nn.TransformerEncoder``'s fast path) is
        padded, attended and returned nested (:mod:`attnkit.backends.torch.nn.fit`)."""
        if isinstance(query, torch.Tensor) and query.is_nested:
            x, padding, lengths = from_nested(
                query, key, value, {"key_padding_mask": key_padding_mask, "attn_mask": attn_mask}
            )
            if not self.batch_first:
                x = x.transpose(0, 1)  # (B, N, D) -> (N, B, D)
            out, _ = self.forward(x, x, x, padding, False, None, average_attn_weights, is_causal)
            return to_nested(out if self.batch_first else out.transpose(0, 1), lengths), None
        rest = (key_padding_mask, need_weights, attn_mask, average_attn_weights, is_causal)
        qkv = (query, key, value)
        dtype = autocast_dtype(query) if all(isinstance(t, torch.Tensor) for t in qkv) else None
        if dtype is None:
            return self._forward(*qkv, *rest)
        with torch.autocast(query.device.type, enabled=False):
            return self._forward(*(t.to(dtype) for t in qkv), *rest, dtype)

    def _forward(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        key_padding_mask: torch.Tensor | None,
        need_weights: bool,
        attn_mask: torch.Tensor | None,
        average_attn_weights: bool,
        is_causal: bool,
        dtype: torch.dtype | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        check_forward(
            self,
            {"query": query, "key": key, "value": value},
            {"key_padding_mask": key_padding_mask, "attn_mask": attn_mask},
            {
                "need_weights": need_weights,
                "average_attn_weights": average_attn_weights,
                "is_causal": is_causal,
            },
        )
        unbatched = query.dim() == 2
        if unbatched:
            query, key, value = (
                t.unsqueeze(1 - int(self.batch_first)) for t in (query, key, value)
            )
            if key_padding_mask is not None:
                key_padding_mask = key_padding_mask.unsqueeze(0)
        if query.dim() != 3 or key.dim() != 3 or value.dim() != 3:
            raise ShapeError(
                "query, key and value must all be 3-D (batched) or all 2-D (unbatched), got "
                f"{tuple(query.shape)}, {tuple(key.shape)}, {tuple(value.shape)}."
            )
        q, k, v = self._batched(query), self._batched(key), self._batched(value)
        B, L, S = q.shape[0], q.shape[1], k.shape[1]
        kpm, am = batched_masks(
            self, key_padding_mask, attn_mask, (B, L, S), (query, key), unbatched
        )
        out, weights = self._attend(
            q,
            k,
            v,
            kpm,
            am,
            need_weights,
            average_attn_weights,
            is_causal or self.is_causal,
            dtype=dtype,
        )
        out = out if self.batch_first else out.transpose(0, 1)
        if unbatched:
            out = out.squeeze(1 - int(self.batch_first))
            weights = None if weights is None else weights.squeeze(0)
        return out, weights

    def _attend(
        self,
        q: torch.Tensor,
        k: torch.Tensor | None,
        v: torch.Tensor | None,
        kpm: torch.Tensor | None,
        am: torch.Tensor | None,
        need_weights: bool,
        average: bool,
        is_causal: bool,
        cache: ak.KVCache | None = None,
        dtype: torch.dtype | None = None,
    ) -> Any:
        p = self.dropout if self.training else 0.0
        params = self.params if dtype is None else cast_params(self.params, dtype)
        result = ak.multi_head_attention(
            q,
            k,
            v,
            params,
            num_heads=self.num_heads,
            num_kv_heads=self.num_kv_heads,
            key_padding_mask=kpm,
            attn_mask=am,
            is_causal=is_causal,
            window=self.window,
            dropout_p=p,
            rng=dropout_generator(self, q) if p > 0 else None,
            need_weights=need_weights,
            average_weights=average,
            add_zero_attn=self.add_zero_attn,
            rope=self.rope,
            cache=cache,
        )
        return (result.output, result.weights) if cache is None else result

    def init_cache(self, batch_size: int, max_length: int) -> ak.KVCache:
        """An empty :class:`attnkit.KVCache` for :meth:`decode` (preallocated)."""
        like = self.out_proj.weight
        return ak.init_kv_cache(
            (batch_size,), self.num_kv_heads, max_length, self.head_dim, like=like.detach()
        )

    def decode(
        self,
        x: torch.Tensor,
        cache: ak.KVCache,
        key_padding_mask: torch.Tensor | None = None,
        need_weights: bool = False,
        average_attn_weights: bool = True,
    ) -> ak.MultiHeadOutput:
        """Self-attention of new positions ``x`` ((B, L, D) with ``batch_first``, else
        (L, B, D)) over the cache and themselves, causally (and within the module's window);
        returns ``(output, weights, new_cache)``.
        ``key_padding_mask`` (B, T), True = padding, covers the cache's T slots."""
        check_flag("need_weights", need_weights)
        check_flag("average_attn_weights", average_attn_weights)
        if self.bias_k is not None or self.add_zero_attn:
            raise ParameterError("decode does not support add_bias_kv or add_zero_attn.")
        if not isinstance(x, torch.Tensor):
            raise ArgumentTypeError(
                f"x must be a torch.Tensor, got {type(x).__module__}.{type(x).__name__}."
            )
        check_width("x", x, self.embed_dim, "embed_dim")
        if x.dim() != 3:
            raise ShapeError(
                f"x must be 3-D, {'(B, L, D)' if self.batch_first else '(L, B, D)'}, got "
                f"{tuple(x.shape)}."
            )
        check_torch_mask("key_padding_mask", key_padding_mask)
        q = self._batched(x)
        kpm = from_torch_mask(key_padding_mask)
        out, weights, cache = self._attend(
            q, None, None, kpm, None, need_weights, average_attn_weights, True, cache
        )
        return ak.MultiHeadOutput(out if self.batch_first else out.transpose(0, 1), weights, cache)

    def extra_repr(self) -> str:
        return (
            f"embed_dim={self.embed_dim}, num_heads={self.num_heads}, "
            f"num_kv_heads={self.num_kv_heads}, batch_first={self.batch_first}"
        )
