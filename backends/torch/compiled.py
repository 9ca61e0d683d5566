"""attnkit under ``torch.compile``: the whole call as one operator of the graph.

While ``torch.compile`` traces, a call whose arguments are tensors and plain values (an
``attn_mask`` tensor or None; ``window`` as ints; ``score_mods.alibi`` / ``softcap`` or
None; no dropout, weights or lse) becomes one call of the custom operator
``attnkit::attention`` (static arguments as a literal string, ``spec``; implementation:
attnkit's eager call), so the graph holds one node whatever L. Its gradient is the
operator ``attnkit::attention_backward``. Other calls are traced as they are.
"""

import ast
import functools
from typing import Any, Optional

import torch

__all__ = ["spec_of", "traced_call"]


def spec_of(options: Any) -> str | None:
    """The options as a literal string the operator rebuilds them from, or None where
    the call does not go through the operator (dropout, weights, lse, a structured mask
    or window, a general callable score_mod). An ``rng`` without dropout draws nothing
    and is left out."""
    o = options
    if o.return_weights is not False or o.return_lse is not False:
        return None
    if type(o.dropout_p) not in (int, float) or o.dropout_p != 0:
        return None
    if o.attn_mask is not None and not isinstance(o.attn_mask, torch.Tensor):
        return None
    window = o.window
    if window is not None and not _plain(window):
        return None
    mod = o.score_mod
    key = None if mod is None else getattr(mod, "key", None)
    if mod is not None and (key is None or key[0] not in ("alibi", "softcap")):
        return None
    values = (
        o.is_causal, o.scale, o.enable_gqa, o.causal_alignment, window, o.q_offset,
        o.kv_offset, o.impl, o.block_size, key,
    )  # fmt: skip
    if not all(_plain(v) for v in values):
        return None
    return repr(values)


def _plain(x: Any) -> bool:
    """A value ``repr`` writes and ``ast.literal_eval`` reads back unchanged."""
    if x is None or type(x) in (bool, int, float, str):
        return True
    return type(x) in (tuple, list) and all(_plain(v) for v in x)


@functools.lru_cache(maxsize=64)
def _parsed(spec: str) -> dict[str, Any]:
    """The options of ``spec`` (parsed once per spec: the operator runs every call)."""
    names = ("is_causal", "scale", "enable_gqa", "causal_alignment", "window", "q_offset",
             "kv_offset", "impl", "block_size", "score_mod")  # fmt: skip
    kw = dict(zip(names, ast.literal_eval(spec), strict=True))
    key = kw["score_mod"]
    if key is not None:
        from attnkit import score_mods

        kind, value = key
        heads = len(value) if kind == "alibi" else None
        kw["score_mod"] = (
            score_mods.alibi(heads, list(value)) if kind == "alibi" else score_mods.softcap(value)
        )
    return kw


def _options(spec: str) -> dict[str, Any]:
    return dict(_parsed(spec))


@torch.library.custom_op("attnkit::attention", mutates_args=())
def _attention(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, mask: Optional[torch.Tensor],  # noqa: UP045 (custom_op reads the annotations)
    spec: str,
) -> torch.Tensor:  # fmt: skip
    import attnkit as ak

    out = ak.scaled_dot_product_attention(query, key, value, attn_mask=mask, **_options(spec))
    return out.clone() if out is query or out is key or out is value else out


@_attention.register_fake
def _(query: Any, key: Any, value: Any, mask: Any, spec: str) -> Any:
    from attnkit.call_checks import check_call

    call = check_call(query, key, value, attn_mask=mask, **_options(spec))
    return query.new_empty((*call.out_lead, call.L, call.Ev))


@torch.library.custom_op("attnkit::attention_backward", mutates_args=())
def _attention_backward(
    grad: torch.Tensor, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
    mask: Optional[torch.Tensor], spec: str,  # noqa: UP045 (custom_op reads the annotations)
) -> list[torch.Tensor]:  # fmt: skip
    import attnkit as ak

    _, vjp = ak.attention_vjp(query, key, value, attn_mask=mask, **_options(spec))
    grads = vjp(grad)
    d_mask = grads[3] if len(grads) > 3 else query.new_empty(0)
    return [grads[0], grads[1], grads[2], d_mask]


@_attention_backward.register_fake
def _(grad: Any, query: Any, key: Any, value: Any, mask: Any, spec: str) -> Any:
    additive = mask is not None and mask.dtype != torch.bool
    d_mask = mask.new_empty(mask.shape) if additive else query.new_empty(0)
    return [query.new_empty(query.shape), key.new_empty(key.shape),
            value.new_empty(value.shape), d_mask]  # fmt: skip


def _setup(ctx: Any, inputs: tuple, output: Any) -> None:
    query, key, value, mask, spec = inputs
    ctx.save_for_backward(query, key, value, mask)
    ctx.spec = spec


def _backward(ctx: Any, grad: Any) -> tuple:
    query, key, value, mask = ctx.saved_tensors
    dq, dk, dv, d_mask = _attention_backward(grad, query, key, value, mask, ctx.spec)
    additive = mask is not None and mask.dtype != torch.bool
    return dq, dk, dv, (d_mask if additive else None), None


_attention.register_autograd(_backward, setup_context=_setup)


def traced_call(query: Any, key: Any, value: Any, options: Any) -> Any:
    """While ``torch.compile`` traces: the call as one ``attnkit::attention`` node, or
    None where it is traced as it is (see the module docstring)."""
    if not torch.compiler.is_compiling():
        return None
    if not all(isinstance(x, torch.Tensor) for x in (query, key, value)):
        return None
    spec = spec_of(options)
    if spec is None:
        return None
    return torch.ops.attnkit.attention(query, key, value, options.attn_mask, spec)
