"""Checks of sequence-parallel calls (:mod:`.sharding`), all before any work.

They read shapes, shardings and Python arguments only (the mesh axis, divisibility by
the device count, the arrays' shardings, the supported keyword arguments), and raise
attnkit errors naming the argument and the fix.
"""

from __future__ import annotations

from typing import Any

from attnkit.errors import ArgumentTypeError, ParameterError, ShapeError
from attnkit.masks import Mask
from attnkit.options import OPTION_NAMES
from attnkit.ring.plan import carries_arrays, split_segments

__all__ = [
    "SUPPORTED_KWARGS",
    "check_call",
    "check_lead_axes",
    "check_lengths",
    "check_mesh_axis",
    "check_sharding",
    "expected_spec",
    "spec_text",
]

#: The core's keyword arguments a sharded call passes through to each piece: its options
#: (:class:`attnkit.options.Options`) but the ones only a whole call can honour.
SUPPORTED_KWARGS = frozenset(OPTION_NAMES) - {"return_weights", "return_lse", "rng"}


def check_mesh_axis(mesh: Any, axis: Any, fn: str) -> int:
    """The size P of mesh axis ``axis``; ParameterError naming the mesh's axes if absent."""
    import jax

    if not isinstance(mesh, jax.sharding.Mesh):
        raise ArgumentTypeError(
            f"{fn} needs mesh=jax.sharding.Mesh, got {type(mesh).__name__}; build one, e.g. "
            "jax.make_mesh((4,), ('seq',))."
        )
    if not isinstance(axis, str) or axis not in mesh.axis_names:
        raise ParameterError(
            f"{fn} got axis={axis!r}, which is not an axis of the mesh (its axes: "
            f"{tuple(mesh.axis_names)}, shape {dict(mesh.shape)}); pass one of those names."
        )
    return int(mesh.shape[axis])


def _aligned_bottom_right(obj: Any) -> bool:
    if getattr(obj, "alignment", None) == "bottom_right":
        return True
    return any(_aligned_bottom_right(p) for p in getattr(obj, "parts", ()))


def check_call(fn: str, q: Any, k: Any, v: Any, kwargs: dict[str, Any]) -> tuple[Any, Any]:
    """Arguments a sharded call cannot take: dropout, lse/weights requests, array masks
    (a ring's segment ids excepted), and bottom-right alignment with L != S (its shift is
    the whole call's). Returns ``attn_mask`` split as (segment ids or None, the rest)."""
    unknown = sorted(set(kwargs) - SUPPORTED_KWARGS)
    if unknown:
        raise ParameterError(
            f"{fn} got {unknown}, which it does not support (it returns the output only and "
            f"takes the core's {sorted(SUPPORTED_KWARGS - {'dropout_p'})}); call "
            "attnkit.scaled_dot_product_attention on one device for weights or lse."
        )
    if kwargs.get("dropout_p", 0.0) != 0.0:
        raise ParameterError(
            f"{fn} got dropout_p={kwargs['dropout_p']!r}; sharded attention has no dropout "
            "(apply dropout to the output, or use dropout_p=0.0)."
        )
    block = kwargs.get("block_size")
    if block is not None and (type(block) is not int or block < 1):
        # checked here, not by each piece's core call: that comes after compilation
        raise ParameterError(
            f"{fn} got block_size={block!r}; pass a positive int (the query block of each "
            "device's core calls) or None for the core's default."
        )
    mask = kwargs.get("attn_mask")
    window = kwargs.get("window")
    segments, rest = split_segments(mask) if fn == "ring_attention" else (None, mask)
    for name, m in (("attn_mask", rest), ("window", window)):
        if m is None or (name == "window" and not isinstance(m, Mask)):
            continue
        if not isinstance(m, Mask) or carries_arrays(m):
            what = f"an array of shape {tuple(m.shape)}" if hasattr(m, "shape") else repr(m)
            ids = (
                "attnkit.masks.segments(q_ids, kv_ids) with the ids sharded like the "
                "sequence (alone or & a positional structure), "
                if fn == "ring_attention"
                else "ring_attention for segment ids, "
            )
            raise ParameterError(
                f"{fn} got {name}={what}, a mask carried by arrays; a sharded call applies "
                "masks by absolute position on each device, so pass a positional structure "
                "(attnkit.masks.causal, sliding_window, documents(lengths), global_tokens, "
                f"block_sparse, key_padding with int lengths) or is_causal/window; {ids}"
                "or call the core on one device."
            )
    import jax

    for what, ids in (() if segments is None else (("q_ids", segments.q_ids),
                                                     ("kv_ids", segments.kv_ids))):  # fmt: skip
        if not isinstance(ids, jax.Array):
            raise ArgumentTypeError(
                f"{fn} got attn_mask segments {what} of type {type(ids).__name__}; pass JAX "
                "arrays of the whole sequence's ids (..., L) and (..., S), in the same order "
                "as q and k (zigzag_shard(ids, P, axis=-1) for zigzag)."
            )
    L, S = q.shape[-2], k.shape[-2]
    alignment = kwargs.get("causal_alignment", "top_left")
    bottom = alignment == "bottom_right" or any(_aligned_bottom_right(m) for m in (mask, window))
    if L != S and bottom:
        raise ParameterError(
            f"{fn} got bottom_right alignment with L = {L} queries and S = {S} keys; pass "
            f"causal_alignment='top_left' and q_offset = q_offset + S - L (= {S - L} more), "
            "which places the queries the same way."
        )
    return segments, rest


def check_lengths(fn: str, arrays: dict[str, Any], parts: int, layout: str, axis: str) -> None:
    """Each array's sequence axis (-2) divides by P (by 2P for zigzag)."""
    for name, x in arrays.items():
        if getattr(x, "ndim", 0) < 2:
            raise ShapeError(
                f"{fn} got {name} of shape {tuple(getattr(x, 'shape', ()))}; it needs rank >= "
                "2, (..., length, features)."
            )
    need = 2 * parts if layout == "zigzag" else parts
    for name, x in arrays.items():
        n = x.shape[-2]
        if n % need:
            more = (-n) % need
            raise ShapeError(
                f"{fn} got {name} of shape {tuple(x.shape)}: its length {n} (axis -2) does not "
                f"divide by {need} ({'2 x ' if layout == 'zigzag' else ''}{parts} devices on "
                f"mesh axis {axis!r}, layout={layout!r}); pad it to a multiple of {need} "
                f"({n + more}, masking the padding with attnkit.masks.key_padding or documents)."
            )


def expected_spec(ndim: int, axis: str, lead_axes: tuple[Any, ...] = ()) -> Any:
    """PartitionSpec(*lead_axes, None, ..., axis, None): the sequence axis (-2) sharded
    along ``axis``, the first leading dims along ``lead_axes`` (None: replicated)."""
    from jax.sharding import PartitionSpec

    return PartitionSpec(*lead_axes, *([None] * (ndim - 2 - len(lead_axes))), axis, None)


def check_lead_axes(
    fn: str, mesh: Any, axis: str, lead_axes: Any, arrays: dict[str, Any], kwargs: dict[str, Any]
) -> tuple[Any, ...]:
    """``lead_axes``, the mesh axes of the first leading dims (batch, heads), checked:
    a tuple of mesh axis names or None, none of them ``axis`` or repeated; q, k, v of one
    rank with at least that many leading dims; each sharded dim the same size in all
    three (the head dim may differ under GQA), divisible by its mesh axis; no score_mod
    when heads are sharded (it would see local head indices) and no mask whose leading
    dims vary along a sharded dim (each device would need its own slice)."""
    if lead_axes is None:
        return ()
    if isinstance(lead_axes, str) or not isinstance(lead_axes, (tuple, list)):
        raise ParameterError(
            f"{fn} got lead_axes={lead_axes!r}; pass a tuple of mesh axis names or None, one "
            "per leading dim from the left, e.g. lead_axes=('data',) for (B, H, L, E) "
            "sharded on batch."
        )
    lead_axes = tuple(lead_axes)
    named = [a for a in lead_axes if a is not None]
    for a in lead_axes:
        if a is not None and (not isinstance(a, str) or a not in mesh.axis_names):
            raise ParameterError(
                f"{fn} got lead_axes={lead_axes!r}: {a!r} is not an axis of the mesh (its "
                f"axes: {tuple(mesh.axis_names)}); pass mesh axis names or None."
            )
    if axis in named or len(set(named)) != len(named):
        raise ParameterError(
            f"{fn} got lead_axes={lead_axes!r} with sequence axis {axis!r}: each mesh axis "
            "may shard one dim only, and the sequence axis shards the length; use distinct "
            "axes, e.g. a mesh ('data', 'seq') with lead_axes=('data',)."
        )
    if not named:
        return lead_axes
    ranks = {name: x.ndim for name, x in arrays.items()}
    if len(set(ranks.values())) != 1 or min(ranks.values()) - 2 < len(lead_axes):
        shapes = {name: tuple(x.shape) for name, x in arrays.items()}
        raise ShapeError(
            f"{fn} got lead_axes={lead_axes!r} with {shapes}: sharded leading dims need "
            f"query, key and value of one rank with at least {len(lead_axes)} leading "
            "dims (no broadcasting across a sharded dim); expand them to the same rank "
            "with their full sizes."
        )
    ndim = next(iter(ranks.values()))
    for i, a in enumerate(lead_axes):
        if a is None:
            continue
        size = int(mesh.shape[a])
        heads = i == ndim - 3 and kwargs.get("enable_gqa", False)
        sizes = {name: x.shape[i] for name, x in arrays.items()}
        if (not heads and len(set(sizes.values())) != 1) or any(n % size for n in sizes.values()):
            raise ShapeError(
                f"{fn} got lead_axes={lead_axes!r}: dim {i} has sizes {sizes}, which must be "
                f"equal{' (or, the head dim under GQA, each)' if i == ndim - 3 else ''} and "
                f"divisible by the {size} devices of mesh axis {a!r}; pad or reshape that "
                "dim, or leave it replicated (None)."
            )
    if (
        ndim - 3 < len(lead_axes)
        and lead_axes[ndim - 3] is not None
        and (kwargs.get("score_mod") is not None)
    ):
        raise ParameterError(
            f"{fn} got a score_mod with the head dim sharded (lead_axes={lead_axes!r}); a "
            "score_mod would see each device's local head indices: leave the heads "
            "replicated (None) or drop the score_mod."
        )
    n = ndim - 2
    for name in ("attn_mask", "window"):
        lead = tuple(getattr(kwargs.get(name), "lead", ()) or ())
        for i, a in enumerate(lead_axes):
            j = i - (n - len(lead))
            if a is not None and 0 <= j < len(lead) and lead[j] != 1:
                raise ParameterError(
                    f"{fn} got {name} with leading dims {lead} and lead_axes={lead_axes!r}: "
                    f"the mask varies along dim {i}, which is sharded on {a!r}; a mask "
                    "shared along sharded dims is required (leave that dim replicated, or "
                    "call once per shard of it)."
                )
    return lead_axes


def _normalized(spec: Any, ndim: int) -> tuple[Any, ...]:
    entries = tuple(spec) + (None,) * (ndim - len(tuple(spec)))
    return tuple(e[0] if isinstance(e, tuple) and len(e) == 1 else e for e in entries)


def _sharding_of(x: Any) -> Any:
    """The NamedSharding of a concrete array, or of a traced one on an Explicit mesh
    (``jax.typeof``); None where the array carries none."""
    import jax

    if isinstance(x, jax.core.Tracer):
        sharding = getattr(jax.typeof(x), "sharding", None)
    else:
        sharding = getattr(x, "sharding", None)
    if not isinstance(sharding, jax.sharding.NamedSharding) or not sharding.mesh.axis_names:
        return None
    return sharding


def spec_text(spec: Any) -> str:
    """``PartitionSpec(None, 'seq', None)``: a spec as a user would write it."""
    return "PartitionSpec(" + ", ".join(repr(e) for e in tuple(spec)) + ")"


def check_sharding(fn: str, name: str, x: Any, mesh: Any, spec: Any) -> None:
    """An array sharded by a NamedSharding (concrete, or traced on an Explicit mesh) must
    be sharded as ``spec`` on ``mesh``; replicated and one-device arrays, and arrays
    traced on an Auto mesh, are placed by the call."""
    sharding = _sharding_of(x)
    if sharding is None or all(e is None for e in _normalized(sharding.spec, x.ndim)):
        return
    same_mesh = dict(sharding.mesh.shape) == dict(mesh.shape)
    if not same_mesh or _normalized(sharding.spec, x.ndim) != _normalized(spec, x.ndim):
        raise ParameterError(
            f"{fn} got {name} of shape {tuple(x.shape)} sharded as {spec_text(sharding.spec)} "
            f"on a mesh {dict(sharding.mesh.shape)}; it expects {spec_text(spec)} on the mesh "
            f"{dict(mesh.shape)} (the sequence axis -2 split along the mesh axis); place it "
            f"with jax.device_put({name}, NamedSharding(mesh, {spec_text(spec)}))."
        )
