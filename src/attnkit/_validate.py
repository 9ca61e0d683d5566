"""Input checks for :func:`attnkit.scaled_dot_product_attention`, gathered in one place.

Everything here runs before any array work and costs microseconds: it reads shapes,
dtypes, namespaces and devices, never values. It returns a :class:`Problem`, the
normalized description the executors work from. Messages name the argument, its shape
or dtype, the axis, what was expected and how to fix it.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Any

import array_api_compat as aac

from . import masks
from .errors import (
    ArgumentTypeError,
    DeviceMismatchError,
    DTypeError,
    NamespaceMismatchError,
    ParameterError,
    ShapeError,
)
from .masks import Geometry, Mask
from .score_mods import check_score_mod
from .shapes import broadcast_shapes, describe

__all__ = ["ALIGNMENTS", "IMPLS", "Problem", "check_flag", "prepare", "signature"]

IMPLS = ("auto", "generic", "reference")
ALIGNMENTS = ("top_left", "bottom_right")


@dataclass(slots=True)  # not frozen: frozen dataclasses cost microseconds per call
class Problem:
    """A validated attention call, in the shapes the executors use.

    With GQA (G = Hq // Hkv > 1) the arrays are already reshaped:
    query (..., Hkv, G, L, E), key (..., Hkv, 1, S, E), value (..., Hkv, 1, S, Ev),
    mask (..., Hkv|1, G|1, L|1, S|1); ``out_lead`` is the leading shape of the output
    in the caller's terms, (..., Hq).
    """

    xp: Any
    device: Any
    dtype: Any  # the inputs' dtype, also the output's
    compute_dtype: Any  # float32 for float16/bfloat16 inputs, else the input dtype
    query: Any
    key: Any
    value: Any
    mask: Any  # None, bool (True = may attend) or additive float, broadcastable
    mask_is_bool: bool
    out_lead: tuple[int, ...]  # leading dims of the output, (..., Hq)
    L: int
    S: int
    Ev: int
    scale: float
    structure: Any  # attnkit.masks.Mask: causal & window & a structured attn_mask, or None
    geometry: Any  # attnkit.masks.Geometry: L, S, q_offset, kv_offset
    dropout_p: float
    rng: Any
    gqa_groups: int
    score_mod: Any  # None or f(scores, q_idx, kv_idx, head) -> scores
    num_heads: int  # Hq (1 for inputs without a head axis)
    block_kernel: Any = None  # a backend's fused per-block kernel (impl="auto"), or None


def _namespace(name: str, x: Any) -> Any:
    if not aac.is_array_api_obj(x):
        raise ArgumentTypeError(
            f"{name} must be an array (NumPy, PyTorch, JAX or any array-API array), "
            f"got {type(x).__name__}; convert it first, e.g. numpy.asarray({name})."
        )
    return aac.array_namespace(x)


def _foreign_mask(query: Any, attn_mask: Any) -> tuple[Mask, tuple[int, int] | None]:
    """A framework's own mask object (PyTorch's ``CausalBias``) as an attnkit Mask, through
    the query's backend adapter (``foreign_mask``), with the (L, S) it was built for."""
    converted = None
    if aac.is_array_api_obj(query):
        from . import backends

        name = backends.name_or_none(aac.array_namespace(query))
        convert = None if name is None else getattr(backends.load(name), "foreign_mask", None)
        converted = None if convert is None else convert(attn_mask)
    if converted is None and aac.is_array_api_obj(attn_mask):
        return attn_mask, None  # an array of another type: the array checks judge it
    if converted is None:
        raise ArgumentTypeError(
            f"attn_mask must be an array (bool: True = may attend; or float, added to the "
            f"scores), an attnkit.masks mask or None, got {type(attn_mask).__name__}; convert it "
            "first, e.g. numpy.asarray(attn_mask)."
        )
    return converted


def _check_window(window: Any) -> Any:
    if window is None or isinstance(window, Mask):
        return window  # an attnkit.masks mask (e.g. sliding_window) is taken as it is
    return masks.window_sides(window)


def _is_int(value: Any) -> bool:
    # type() first: the ABC isinstance check costs about a microsecond per call.
    return type(value) is int or (
        isinstance(value, numbers.Integral) and not isinstance(value, bool)
    )


def _is_real(value: Any) -> bool:
    return type(value) in (float, int) or (
        isinstance(value, numbers.Real) and not isinstance(value, bool)
    )


def check_flag(name: str, value: Any) -> None:
    """A boolean argument must be True or False: "no", 0 or None are refused, not taken by
    truthiness."""
    if type(value) is not bool:
        raise ParameterError(
            f"{name} must be True or False, got {value!r} ({type(value).__name__}); pass a "
            f"bool (e.g. {name}=bool(...))."
        )


def _check_int(name: str, value: Any) -> int:
    if not _is_int(value):
        raise ParameterError(
            f"{name} must be a Python int (an absolute position), got {type(value).__name__} "
            f"{value!r}; positions are static, pass int({name})."
        )
    return int(value)


def _check_scalars(
    dropout_p: Any, scale: Any, impl: Any, causal_alignment: Any, is_causal: Any, enable_gqa: Any
) -> None:
    if impl not in IMPLS:
        raise ParameterError(f"impl must be one of {IMPLS}, got {impl!r}.")
    if causal_alignment not in ALIGNMENTS:
        raise ParameterError(
            f"causal_alignment must be 'top_left' (PyTorch: query i sees keys 0..i) or "
            f"'bottom_right' (FlashAttention: the last query sees the last key), "
            f"got {causal_alignment!r}."
        )
    check_flag("is_causal", is_causal)
    if not _is_real(dropout_p) or not 0.0 <= dropout_p < 1.0:
        raise ParameterError(
            f"dropout_p must be a float in [0, 1), got {dropout_p!r}; use 0.0 to disable "
            "dropout (for example at evaluation time)."
        )
    check_flag("enable_gqa", enable_gqa)
    if scale is not None and (not _is_real(scale) or not math.isfinite(scale)):
        raise ParameterError(
            f"scale must be None (1/sqrt(E)) or a finite real number, got {scale!r}."
        )


def _same_library(x: Any, query: Any, xp: Any) -> bool:
    # Same type, same library: skips array_namespace on the hot path (decoding steps).
    return type(x) is type(query) or _namespace_of(x) is xp


def _namespace_of(x: Any) -> Any:
    return aac.array_namespace(x) if aac.is_array_api_obj(x) else None


def _device_of(x: Any, like: Any) -> Any:
    if type(x) is type(like):
        try:
            return x.device  # torch, NumPy >= 2, array-api-strict, concrete JAX arrays
        except Exception:  # JAX tracers have no device
            pass
    return aac.device(x)


def _check_arrays(query: Any, key: Any, value: Any, attn_mask: Any) -> tuple[Any, Any]:
    """Namespace, rank, dtype and device checks; returns (xp, device).

    This runs on every call, decoding steps included, so it reads only attributes and
    calls array_namespace once where all inputs share a type.
    """
    named = [("query", query), ("key", key), ("value", value)]
    if attn_mask is not None and not isinstance(attn_mask, Mask):
        named.append(("attn_mask", attn_mask))
    xp = _namespace("query", query)
    for name, x in named[1:]:
        if not _same_library(x, query, xp):
            _namespace(name, x)  # raises for non-arrays
            raise NamespaceMismatchError(
                f"{name} comes from {type(x).__module__}.{type(x).__name__} but query from "
                f"{type(query).__module__}.{type(query).__name__}; attention needs arrays of "
                f"one library: convert {name} to query's array type."
            )
    for name, x in named[:3]:
        if x.ndim < 2:
            raise ShapeError(
                f"{name} must have rank >= 2 (..., length, features), got shape "
                f"{tuple(x.shape)}; add a length axis, e.g. {name}[None, :]."
            )
        if getattr(x, "is_nested", False) is True:
            raise ArgumentTypeError(
                f"{name} is a nested (jagged) tensor {describe(x)}; attnkit takes dense arrays: "
                f"pad it (torch.nested.to_padded_tensor({name}, 0.0)) and mask the padding "
                "with attn_mask=attnkit.masks.key_padding(lengths)."
            )
        if (x is query or x.dtype != query.dtype) and not xp.isdtype(x.dtype, "real floating"):
            raise DTypeError(
                f"{name} has dtype {x.dtype} ({describe(x)}); attention needs real floating "
                f"arrays: cast it, e.g. {name}.astype(float32)."
            )
        if x is query and x.dtype not in _supported_dtypes(xp):
            raise DTypeError(
                f"{name} has dtype {x.dtype} ({describe(x)}); attnkit computes in float16, "
                f"bfloat16, float32 or float64: cast it, e.g. {name}.astype(float64) (NumPy's "
                "longdouble would otherwise be computed in a lower precision than it claims)."
            )
    for name, x in named[1:3]:
        if x.dtype != query.dtype:
            raise DTypeError(
                f"{name} is {describe(x)} but query is {describe(query)}; query, key and value "
                f"must share one dtype: cast {name} to {query.dtype}."
            )
    if (
        attn_mask is not None
        and not isinstance(attn_mask, Mask)
        and not (attn_mask.dtype == xp.bool or xp.isdtype(attn_mask.dtype, "real floating"))
    ):
        raise DTypeError(
            f"attn_mask has dtype {attn_mask.dtype} ({describe(attn_mask)}); expected bool "
            "(True = may attend) or a real floating additive mask (0 or -inf): cast it, e.g. "
            "attn_mask != 0 for a 0/1 integer mask."
        )
    device = aac.device(query)
    for name, x in named[1:]:
        other = _device_of(x, query) if device is not None else None
        # JAX tracers (under jit or grad) report no device: nothing to compare there.
        if other != device and other is not None and device is not None:
            raise DeviceMismatchError(
                f"{name} is on device {other} but query is on {device}; move {name} to "
                f"query's device (e.g. {name}.to_device(query.device) or {name}.to(device))."
            )
    return xp, device


_LAYOUT_HINT = (
    ". attnkit expects (..., H, L, E): inputs in (B, L, H, E) layout (FlashAttention, "
    "jax.nn, projections before the head transpose) must be transposed to (B, H, L, E) "
    "first: x.transpose(1, 2) in PyTorch, jnp.swapaxes(x, 1, 2) or np.swapaxes(x, 1, 2)"
)


def _supported_dtypes(xp: Any) -> tuple[Any, ...]:
    """float32 and float64, and the 16-bit floats the namespace has (computed in float32)."""
    extra = tuple(getattr(xp, name) for name in ("float16", "bfloat16") if hasattr(xp, name))
    return (xp.float32, xp.float64, *extra)


def _check_shapes(
    query: Any, key: Any, value: Any, enable_gqa: bool
) -> tuple[int, tuple[int, ...]]:
    """Feature, length and head checks; returns (G, out_lead)."""
    shapes = f"query {tuple(query.shape)}, key {tuple(key.shape)}, value {tuple(value.shape)}"
    if key.shape[-1] != query.shape[-1]:
        raise ShapeError(
            f"key has {key.shape[-1]} features on its last axis but query has "
            f"{query.shape[-1]}: {shapes}. Query and key must share E (value may differ)."
        )
    if value.shape[-2] != key.shape[-2]:
        raise ShapeError(
            f"value has length {value.shape[-2]} on axis -2 but key has {key.shape[-2]}: "
            f"{shapes}. Key and value must have one row per key position (same S)."
        )
    groups = 1
    q_heads = query.shape[-3] if query.ndim >= 3 else 1
    kv_heads = key.shape[-3] if key.ndim >= 3 else 1
    v_heads = value.shape[-3] if value.ndim >= 3 else 1
    if enable_gqa and key.ndim >= 3 and v_heads != kv_heads:
        raise ShapeError(
            f"enable_gqa needs key and value to have the same heads on axis -3, got key "
            f"Hkv={kv_heads} and value {v_heads} heads: {shapes}. attnkit groups query "
            "heads over one key/value head count (PyTorch's math backend repeats key and "
            "value heads separately, a documented difference); give value the key's heads."
        )
    if enable_gqa and query.ndim >= 3 and key.ndim >= 3 and q_heads != kv_heads:
        if kv_heads == 0 or q_heads % kv_heads != 0:
            raise ShapeError(
                f"enable_gqa needs query heads Hq divisible by key heads Hkv on axis -3, got "
                f"Hq={q_heads} and Hkv={kv_heads}: {shapes}. Use Hkv among the divisors of Hq"
                f"{_LAYOUT_HINT if query.ndim >= 4 else ''}."
            )
        groups = q_heads // kv_heads
        batch = broadcast_shapes(query.shape[:-3], key.shape[:-3], value.shape[:-3])
        if batch is None:
            raise ShapeError(
                f"the batch dims (all axes before the head axis -3) do not broadcast: {shapes}. "
                "Make them equal or 1."
            )
        return groups, (*batch, q_heads)
    lead = broadcast_shapes(query.shape[:-2], key.shape[:-2], value.shape[:-2])
    if lead is None:
        hint = "Make the leading dims equal or 1"
        if query.ndim >= 3 and key.ndim >= 3 and q_heads != kv_heads and kv_heads != 1:
            hint = (
                f"attnkit expects (..., H, L, E): if axis -3 holds heads, query has Hq={q_heads} "
                f"and key Hkv={kv_heads}: set enable_gqa=True for grouped-query attention, or "
                "make them equal"
            )
        if query.ndim >= 4:
            hint += _LAYOUT_HINT
        raise ShapeError(
            f"the leading dims (all axes before -2) do not broadcast: {shapes}. {hint}."
        )
    return groups, lead


def _check_mask(attn_mask: Any, out_lead: tuple[int, ...], L: int, S: int) -> None:
    target = (*out_lead, L, S)
    if broadcast_shapes(tuple(attn_mask.shape), target) != target:
        raise ShapeError(
            f"attn_mask of shape {tuple(attn_mask.shape)} does not broadcast to the attention "
            f"shape (..., Hq, L, S) = {target}; each axis must equal the target's or be 1 "
            f"(e.g. (L, S) = {(L, S)}, (1, S), or (B, 1, L, S))."
        )


def _structure(
    is_causal: bool,
    window: Any,
    alignment: str,
    attn_mask: Any,
    out_lead: tuple[int, ...],
    L: int,
    S: int,
) -> Mask | None:
    """causal & window & a structured ``attn_mask``, as one Mask (None when unstructured)."""
    parts: list[Mask] = []
    if is_causal:
        parts.append(masks.causal(alignment))
    if isinstance(window, Mask):
        parts.append(window)
    elif window is not None:
        parts.append(masks.sliding_window(window, alignment))
    if isinstance(attn_mask, Mask):
        target = (*out_lead, L, S)
        if broadcast_shapes((*attn_mask.lead, L, S), target) != target:
            raise ShapeError(
                f"attn_mask {attn_mask!r} carries leading dims {attn_mask.lead} that do not "
                f"broadcast to the attention shape (..., Hq, L, S) = {target}."
            )
        parts.append(attn_mask)
    if not parts:
        return None
    structure = parts[0]
    for part in parts[1:]:
        structure = structure & part
    return structure


def gqa_mask(xp: Any, mask: Any, groups: int) -> Any:
    """A mask (..., Hq|1, L|1, S|1) in GQA layout (..., Hkv|1, G|1, L|1, S|1)."""
    if mask.ndim < 3:
        return mask  # no head axis: broadcasts over (Hkv, G) as it is
    *m_batch, m_heads, m_rows, m_cols = mask.shape
    if m_heads == 1:
        return xp.expand_dims(mask, axis=-3)  # (..., 1, 1, L|1, S|1)
    return xp.reshape(mask, (*m_batch, m_heads // groups, groups, m_rows, m_cols))


def _reshape_for_gqa(
    xp: Any, query: Any, key: Any, value: Any, mask: Any, groups: int
) -> tuple[Any, Any, Any, Any]:
    """Split the query heads into (Hkv, G) and add a size-1 group axis to key and value."""
    *q_batch, q_heads, L, E = query.shape
    query = xp.reshape(query, (*q_batch, q_heads // groups, groups, L, E))  # (..., Hkv, G, L, E)
    key = xp.expand_dims(key, axis=-3)  # (..., Hkv, 1, S, E)
    value = xp.expand_dims(value, axis=-3)  # (..., Hkv, 1, S, Ev)
    if mask is not None:
        mask = gqa_mask(xp, mask, groups)
    return query, key, value, mask


def prepare(
    query: Any,
    key: Any,
    value: Any,
    attn_mask: Any,
    dropout_p: Any,
    is_causal: Any,
    scale: Any,
    enable_gqa: Any,
    causal_alignment: Any,
    window: Any,
    q_offset: Any,
    kv_offset: Any,
    rng: Any,
    impl: Any,
    score_mod: Any = None,
    sig: tuple[Any, ...] | None = None,
) -> Problem:
    """Validate one call and return its :class:`Problem`; raise before any work.

    A call without mask, window, dropout or score_mod whose signature (array types,
    shapes, dtypes, devices and scalar arguments) was validated before reuses that
    validation (:func:`signature`): a decoding loop pays for its checks once. ``sig``:
    the call's signature where the caller computed it already.
    """
    plain = attn_mask is None and window is None and score_mod is None
    if not (plain and type(dropout_p) in (float, int) and dropout_p == 0):
        sig = None  # only plain calls are validated by signature
    elif sig is None:
        sig = signature(query, key, value, is_causal, scale, enable_gqa,
                        causal_alignment, q_offset, kv_offset, impl)  # fmt: skip
    known = _VALIDATED.get(sig) if sig is not None else None
    if known is not None:
        return _from_signature(known, query, key, value)
    args = (attn_mask, dropout_p, is_causal, scale, enable_gqa, causal_alignment, window)
    problem = _prepare(query, key, value, *args, q_offset, kv_offset, rng, impl, score_mod)
    if sig is not None:
        if len(_VALIDATED) >= _VALIDATED_MAX:
            _VALIDATED.clear()
        _VALIDATED[sig] = _from_signature(problem, None, None, None)  # no arrays kept
    return problem


#: Problems of validated signatures (their arrays are replaced on reuse), at most
#: _VALIDATED_MAX of them.
_VALIDATED: dict[tuple[Any, ...], Problem] = {}
_VALIDATED_MAX = 64


def signature(
    query: Any,
    key: Any,
    value: Any,
    is_causal: Any,
    scale: Any,
    enable_gqa: Any,
    causal_alignment: Any,
    q_offset: Any,
    kv_offset: Any,
    impl: Any,
) -> tuple[Any, ...] | None:
    """What decides a plain call's validation, or None where it cannot be told cheaply
    (types other than the exact builtins, arrays without a ``device`` attribute such as
    JAX tracers): such calls are validated in full every time."""
    t = type(query)
    if not (
        type(key) is t
        and type(value) is t
        and type(is_causal) is bool
        and type(enable_gqa) is bool
        and (scale is None or type(scale) is float)
        and type(q_offset) is int
        and type(kv_offset) is int
        and type(impl) is str
        and type(causal_alignment) is str
    ):
        return None
    try:
        # shapes as they come: tuples, or torch.Size (a tuple subclass, hashed alike)
        return (t, query.shape, key.shape, value.shape, query.dtype, key.dtype, value.dtype,
                query.device, key.device, value.device, is_causal, scale, enable_gqa,
                causal_alignment, q_offset, kv_offset, impl)  # fmt: skip
    except (AttributeError, TypeError, RuntimeError, ValueError):  # tracers, unhashable
        return None


def _from_signature(known: Problem, query: Any, key: Any, value: Any) -> Problem:
    """A Problem for new arrays of an already validated signature (None: no arrays)."""
    if known.gqa_groups > 1 and query is not None:
        query, key, value, _ = _reshape_for_gqa(known.xp, query, key, value, None, known.gqa_groups)
    return Problem(known.xp, known.device, known.dtype, known.compute_dtype, query, key, value,
                   None, False, known.out_lead, known.L, known.S, known.Ev, known.scale,
                   known.structure, known.geometry, 0.0, None, known.gqa_groups, None,
                   known.num_heads)  # fmt: skip


def _prepare(
    query: Any,
    key: Any,
    value: Any,
    attn_mask: Any,
    dropout_p: Any,
    is_causal: Any,
    scale: Any,
    enable_gqa: Any,
    causal_alignment: Any,
    window: Any,
    q_offset: Any,
    kv_offset: Any,
    rng: Any,
    impl: Any,
    score_mod: Any,
) -> Problem:
    _check_scalars(dropout_p, scale, impl, causal_alignment, is_causal, enable_gqa)
    window = _check_window(window)
    q_offset = _check_int("q_offset", q_offset)
    kv_offset = _check_int("kv_offset", kv_offset)
    sizes = None
    if not (attn_mask is None or isinstance(attn_mask, Mask) or type(attn_mask) is type(query)):
        attn_mask, sizes = _foreign_mask(query, attn_mask)
    xp, device = _check_arrays(query, key, value, attn_mask)
    groups, out_lead = _check_shapes(query, key, value, enable_gqa)
    L, E = query.shape[-2], query.shape[-1]
    S, Ev = key.shape[-2], value.shape[-1]
    if sizes is not None and sizes != (L, S):
        raise ShapeError(
            f"attn_mask is a causal bias for (L, S) = {sizes} but the call has query length "
            f"L = {L} and key length S = {S}; build it for these lengths."
        )
    structure = _structure(is_causal, window, causal_alignment, attn_mask, out_lead, L, S)
    geometry = Geometry(L, S, q_offset, kv_offset)
    if isinstance(window, Mask):
        window.check(xp, device, geometry, "window")
    if isinstance(attn_mask, Mask):
        attn_mask.check(xp, device, geometry, "attn_mask")
        attn_mask = None
    if score_mod is not None:  # it is given absolute positions (q_idx, kv_idx)
        masks.check_position_range(xp, device, geometry, "score_mod", score_mod)
    if attn_mask is not None:
        _check_mask(attn_mask, out_lead, L, S)
        if attn_mask.ndim < 2:  # (S,) or a scalar: give it the (L|1, S|1) axes the executors slice
            attn_mask = xp.reshape(attn_mask, (1,) * (2 - attn_mask.ndim) + tuple(attn_mask.shape))
    if dropout_p > 0:
        if rng is None:
            raise ParameterError(
                f"dropout_p={dropout_p} needs an explicit rng (attnkit keeps no hidden random "
                "state): pass rng=numpy.random.default_rng(seed), "
                "torch.Generator().manual_seed(seed) or jax.random.key(seed)."
            )
        from . import backends

        backends.for_namespace(xp).check_rng(rng, like=query)
    if groups > 1:
        query, key, value, attn_mask = _reshape_for_gqa(xp, query, key, value, attn_mask, groups)
    dtype = query.dtype
    compute_dtype = dtype if dtype in (xp.float32, xp.float64) else xp.float32
    num_heads = out_lead[-1] if out_lead and query.ndim >= 3 else 1
    return Problem(
        xp=xp,
        device=device,
        dtype=dtype,
        compute_dtype=compute_dtype,
        query=query,
        key=key,
        value=value,
        mask=attn_mask,
        mask_is_bool=attn_mask is not None and attn_mask.dtype == xp.bool,
        out_lead=out_lead,
        L=L,
        S=S,
        Ev=Ev,
        scale=(1.0 / math.sqrt(E) if E > 0 else 1.0) if scale is None else float(scale),
        structure=structure,
        geometry=geometry,
        dropout_p=float(dropout_p),
        rng=rng if dropout_p > 0 else None,
        gqa_groups=groups,
        score_mod=check_score_mod(score_mod, num_heads),
        num_heads=num_heads,
    )
