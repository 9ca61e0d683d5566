"""PyTorch ``nn.Module`` wrappers: one thin adapter over attnkit's core.

All the math is :func:`attnkit.scaled_dot_product_attention`,
:func:`attnkit.multi_head_attention` and :mod:`attnkit.approx` (whose modules,
``LinformerAttention``, ``PerformerAttention`` and ``NystromAttention``, live in
``nn_approx.py`` and are re-exported here); these classes only hold ``nn.Parameter``s, convert
PyTorch's conventions, and draw dropout from a ``torch.Generator``.

Shape legend: B batch, L target length, S source length, D ``embed_dim``, Hq/Hkv heads.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

import attnkit as ak
from attnkit._mha_validate import check_flag, check_heads
from attnkit.errors import ArgumentTypeError, DTypeError, ParameterError, ShapeError

from .nn_approx import LinformerAttention, NystromAttention, PerformerAttention

__all__ = [
    "LinformerAttention",
    "MultiheadAttention",
    "NystromAttention",
    "PerformerAttention",
    "ScaledDotProductAttention",
]


def _generator(module: nn.Module, like: torch.Tensor) -> torch.Generator:
    """The module's generator if set, else a fresh one seeded from torch's global RNG
    (so ``torch.manual_seed`` makes dropout reproducible, as with ``nn.Dropout``)."""
    gen = getattr(module, "generator", None)
    if gen is not None:
        return gen
    seed = int(torch.randint(0, 2**62, (1,)).item())
    return torch.Generator(device=like.device).manual_seed(seed)


class ScaledDotProductAttention(nn.Module):
    """Attention over given heads, ``softmax(q k^T * scale + mask) v``, as a module.

    ``forward(query (..., Hq, L, E), key (..., Hkv, S, E), value (..., Hkv, S, Ev),
    attn_mask=None, need_weights=True)`` returns ``(output (..., Hq, L, Ev), weights
    (..., Hq, L, S) or None)``. ``attn_mask`` is bool (True = may attend), additive float,
    or an :mod:`attnkit.masks` mask. Unlike the textbook module it replaces: fully masked
    rows give 0 (not NaN), dropout runs only in training mode, and the weights returned
    are the ones applied.
    """

    def __init__(
        self,
        dropout: float = 0.0,
        *,
        scale: float | None = None,
        is_causal: bool = False,
        window: Any = None,
        enable_gqa: bool = False,
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__()
        if not isinstance(dropout, (int, float)) or not 0.0 <= dropout < 1.0:
            raise ParameterError(f"dropout must be a probability in [0, 1), got {dropout!r}.")
        self.dropout = float(dropout)
        self.scale, self.is_causal, self.window = scale, is_causal, window
        self.enable_gqa, self.generator = enable_gqa, generator

    def forward(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        attn_mask: Any = None,
        need_weights: bool = True,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        p = self.dropout if self.training else 0.0
        result = ak.scaled_dot_product_attention(
            query,
            key,
            value,
            attn_mask,
            p,
            self.is_causal,
            self.scale,
            self.enable_gqa,
            window=self.window,
            return_weights=need_weights,
            rng=_generator(self, query) if p > 0 else None,
        )
        return (result.output, result.weights) if need_weights else (result, None)

    def extra_repr(self) -> str:
        return f"dropout={self.dropout}, is_causal={self.is_causal}, window={self.window}"


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
        self._qkv_same_embed_dim = self.kdim == embed_dim and self.vdim == embed_dim
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
        if self._qkv_same_embed_dim:
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
        like = self.out_proj.weight
        gen = self.generator or torch.Generator().manual_seed(int(torch.randint(0, 2**62, (1,))))
        p = ak.init_multi_head_params(
            self.embed_dim,
            self.num_heads,
            rng=gen,
            num_kv_heads=self.num_kv_heads,
            kdim=self.kdim,
            vdim=self.vdim,
            add_bias_kv=self.bias_k is not None,
            dtype=like.dtype if like.dtype.is_floating_point else torch.float32,
        )
        with torch.no_grad():
            if self._qkv_same_embed_dim:
                self.in_proj_weight.copy_(torch.cat([p.q_weight, p.k_weight, p.v_weight]))
            else:
                self.q_proj_weight.copy_(p.q_weight)
                self.k_proj_weight.copy_(p.k_weight)
                self.v_proj_weight.copy_(p.v_weight)
            if self.in_proj_bias is not None:
                self.in_proj_bias.zero_()
                self.out_proj.bias.zero_()
            self.out_proj.weight.copy_(p.out_weight)
            if self.bias_k is not None:
                self.bias_k.copy_(p.bias_k.reshape(1, 1, -1))
                self.bias_v.copy_(p.bias_v.reshape(1, 1, -1))

    @property
    def params(self) -> ak.MultiHeadParams:
        """The parameters as :class:`attnkit.MultiHeadParams` (views, autograd intact)."""
        bk = None if self.bias_k is None else self.bias_k.reshape(-1)
        bv = None if self.bias_v is None else self.bias_v.reshape(-1)
        out_b = self.out_proj.bias
        if self._qkv_same_embed_dim:
            return ak.MultiHeadParams.from_packed(
                self.in_proj_weight,
                self.out_proj.weight,
                self.in_proj_bias,
                out_b,
                num_heads=self.num_heads,
                num_kv_heads=self.num_kv_heads,
                bias_k=bk,
                bias_v=bv,
            )
        qb = kb = vb = None
        if self.in_proj_bias is not None:
            rq, rk = self.q_proj_weight.shape[0], self.k_proj_weight.shape[0]
            b = self.in_proj_bias
            qb, kb, vb = b[:rq], b[rq : rq + rk], b[rq + rk :]
        return ak.MultiHeadParams(
            self.q_proj_weight,
            self.k_proj_weight,
            self.v_proj_weight,
            self.out_proj.weight,
            qb,
            kb,
            vb,
            out_b,
            bk,
            bv,
        )

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
        attn_weights)`` with weights (B, L, S) averaged or (B, Hq, L, S), or None."""
        for name, flag in (
            ("need_weights", need_weights),
            ("average_attn_weights", average_attn_weights),
            ("is_causal", is_causal),
        ):
            check_flag(name, flag)
        for name, t in (("query", query), ("key", key), ("value", value)):
            if not isinstance(t, torch.Tensor):
                raise ArgumentTypeError(
                    f"{name} must be a torch.Tensor, got {type(t).__module__}.{type(t).__name__}."
                )
        for name, t, width, what in (
            ("query", query, self.embed_dim, "embed_dim"),
            ("key", key, self.kdim, "kdim"),
            ("value", value, self.vdim, "vdim"),
        ):
            _check_width(name, t, width, what)
        _check_torch_mask("key_padding_mask", key_padding_mask)
        _check_torch_mask("attn_mask", attn_mask)
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
        if key_padding_mask is not None and tuple(key_padding_mask.shape) != (B, S):
            want = f"({S},) for unbatched inputs" if unbatched else f"(batch, S) = ({B}, {S})"
            got = tuple(key_padding_mask.shape[1:] if unbatched else key_padding_mask.shape)
            raise ShapeError(
                f"key_padding_mask must be {want} (True = padding, ignored), got {got}; "
                f"query {tuple(query.shape)}, key {tuple(key.shape)}"
                f"{' (batch_first)' if self.batch_first else ' (L, batch, D)'}."
            )
        kpm = _torch_mask(key_padding_mask)
        am = _torch_mask(attn_mask)
        if am is not None and am.dim() == 3:
            if am.shape[0] != B * self.num_heads:
                raise ShapeError(
                    f"a 3-D attn_mask must be (batch * num_heads, L, S) = ({B * self.num_heads}, "
                    f"{L}, {S}), got {tuple(attn_mask.shape)}."
                )
            am = am.reshape(B, self.num_heads, *am.shape[1:])  # (B, Hq, L, S)
        out, weights = self._attend(
            q, k, v, kpm, am, need_weights, average_attn_weights, is_causal or self.is_causal
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
    ) -> Any:
        p = self.dropout if self.training else 0.0
        result = ak.multi_head_attention(
            q,
            k,
            v,
            self.params,
            num_heads=self.num_heads,
            num_kv_heads=self.num_kv_heads,
            key_padding_mask=kpm,
            attn_mask=am,
            is_causal=is_causal,
            window=self.window,
            dropout_p=p,
            rng=_generator(self, q) if p > 0 else None,
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
        _check_width("x", x, self.embed_dim, "embed_dim")
        if x.dim() != 3:
            raise ShapeError(
                f"x must be 3-D, {'(B, L, D)' if self.batch_first else '(L, B, D)'}, got "
                f"{tuple(x.shape)}."
            )
        _check_torch_mask("key_padding_mask", key_padding_mask)
        q = self._batched(x)
        kpm = _torch_mask(key_padding_mask)
        out, weights, cache = self._attend(
            q, None, None, kpm, None, need_weights, average_attn_weights, True, cache
        )
        return ak.MultiHeadOutput(out if self.batch_first else out.transpose(0, 1), weights, cache)

    def extra_repr(self) -> str:
        return (
            f"embed_dim={self.embed_dim}, num_heads={self.num_heads}, "
            f"num_kv_heads={self.num_kv_heads}, batch_first={self.batch_first}"
        )


def _check_width(name: str, x: torch.Tensor, width: int, what: str) -> None:
    """``x``'s last axis must be the module's ``what`` (embed_dim, kdim or vdim)."""
    if x.dim() < 1 or x.shape[-1] != width:
        raise ShapeError(
            f"{name} has {x.shape[-1] if x.dim() else 0} features on its last axis but the "
            f"module has {what}={width}: {name} {tuple(x.shape)}; pass {name} with {width} "
            f"features, or build the module with {what}={x.shape[-1] if x.dim() else 0}."
        )


def _check_torch_mask(name: str, mask: Any) -> None:
    """PyTorch's convention: a bool mask (True = NOT allowed) or a float one (added)."""
    if mask is None:
        return
    if not isinstance(mask, torch.Tensor):
        raise ArgumentTypeError(
            f"{name} must be None or a torch.Tensor, got {type(mask).__module__}."
            f"{type(mask).__name__}; convert it first, e.g. torch.as_tensor({name})."
        )
    if mask.dtype != torch.bool and not mask.dtype.is_floating_point:
        raise DTypeError(
            f"{name} has dtype {mask.dtype} {tuple(mask.shape)}; expected bool (True = padding "
            f"/ not allowed, as torch.nn.MultiheadAttention) or float (added to the scores): "
            f"cast it, e.g. {name}.bool() for a 0/1 mask whose 1 marks what to ignore."
        )


def _torch_mask(mask: torch.Tensor | None) -> torch.Tensor | None:
    """PyTorch's module convention (bool True = NOT allowed; float added) to attnkit's
    (bool True = may attend; float added)."""
    if mask is None:
        return None
    return ~mask if mask.dtype == torch.bool else mask
