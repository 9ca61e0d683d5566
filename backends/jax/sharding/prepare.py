"""What a JAX ring or Ulysses call does before any work: every check (mesh axis, layout,
types, lengths, lead axes, shardings, the core's own), then the inputs placed on the mesh."""

from __future__ import annotations

import dataclasses
from typing import Any

import attnkit as ak
from attnkit.errors import ArgumentTypeError, ParameterError
from attnkit.masks import Mask
from attnkit.ring.plan import LAYOUTS, PlacedMask

from .checks import (
    check_call,
    check_lead_axes,
    check_lengths,
    check_mesh_axis,
    check_sharding,
    expected_spec,
)

__all__ = ["place_on_mesh", "prepare"]


def prepare(
    fn: str,
    q: Any,
    k: Any,
    v: Any,
    mesh: Any,
    axis: Any,
    layout: Any,
    lead_axes: Any,
    kwargs: dict[str, Any],
) -> tuple[int, tuple[Any, ...], dict[str, Any], tuple[Any, Any, Any], Any, Any]:
    """Every check, before any work: (P, (q, k, v, out, lse) PartitionSpecs, the core's
    kwargs with dropout_p dropped and masks placed, (q, k, v) placed on the mesh, the
    output's dtype, and for a ring with segment ids (Segments with the ids placed, their
    two PartitionSpecs), else None)."""
    import jax

    parts = check_mesh_axis(mesh, axis, fn)
    if layout not in LAYOUTS:
        raise ParameterError(f"{fn} got layout={layout!r}; pass one of {LAYOUTS}.")
    for name, x in (("query", q), ("key", k), ("value", v)):
        if not isinstance(x, jax.Array):
            raise ArgumentTypeError(
                f"{fn} takes JAX arrays, got {name} of type {type(x).__name__}; convert it "
                "with jax.numpy.asarray (and place it with jax.device_put)."
            )
    arrays = {"query": q, "key": k, "value": v}
    check_lengths(fn, arrays, parts, layout, axis)  # first: ranks, before any shape[-2]
    segments, rest = check_call(fn, q, k, v, kwargs)  # ids travel with K/V in a ring
    lead = check_lead_axes(fn, mesh, axis, lead_axes, arrays, kwargs)
    specs = [expected_spec(x.ndim, axis, lead) for x in (q, k, v)]
    for name, x, spec in zip(("query", "key", "value"), (q, k, v), specs, strict=True):
        check_sharding(fn, name, x, mesh, spec)
    out_dtype = _core_checks(q, k, v, kwargs, segments, rest)
    out_ndim = max(q.ndim, k.ndim, v.ndim)
    from jax.sharding import PartitionSpec

    lse_spec = PartitionSpec(*lead, *([None] * (out_ndim - 2 - len(lead))), axis)
    specs += [expected_spec(out_ndim, axis, lead), lse_spec]
    core = {key: val for key, val in kwargs.items() if key not in ("dropout_p", "attn_mask")}
    if rest is not None:
        core["attn_mask"] = rest
    for name in ("attn_mask", "window"):
        if isinstance(core.get(name), Mask):
            core[name] = PlacedMask(core[name])
    placed = place_on_mesh(mesh, (q, k, v), specs)
    if segments is not None:  # ids (..., 1, L) and (..., 1, S), sharded on the last axis
        id_specs = [PartitionSpec(*([None] * (x.ndim - 1)), axis)
                    for x in (segments.q_ids, segments.kv_ids)]  # fmt: skip
        ids = place_on_mesh(mesh, (segments.q_ids, segments.kv_ids), id_specs)
        segments = (dataclasses.replace(segments, q_ids=ids[0], kv_ids=ids[1]), id_specs)
    return parts, tuple(specs), core, placed, out_dtype, segments


def _core_checks(
    q: Any, k: Any, v: Any, kwargs: dict[str, Any], segments: Any = None, rest: Any = None
) -> Any:
    """The core's own validation of the whole (global) call: shapes, dtypes, masks
    against the global lengths and offsets, raised as the core raises them. The call is
    traced abstractly (``jax.eval_shape``: nothing is computed) as one block (a caller's
    ``block_size`` is checked by each piece). Returns the output's dtype."""
    import jax

    one_block = {**kwargs, "block_size": max(q.shape[-2], 1)}
    # shapes and dtypes only: with the arrays' shardings, an Explicit mesh's sharding types
    # would make the whole-call products (L@seq x S@seq: scores, a segments mask) illegal
    # shardings (issue 26); segment ids enter as arguments for the same reason
    arrays = (q, k, v) if segments is None else (q, k, v, segments.q_ids, segments.kv_ids)
    bare = [jax.ShapeDtypeStruct(x.shape, x.dtype) for x in arrays]

    def whole(q: Any, k: Any, v: Any, *ids: Any) -> Any:
        kw = one_block
        if ids:
            mask = segments.piece(ids[0], ids[1])  # the whole call's segments mask
            kw = {**one_block, "attn_mask": mask if rest is None else mask & rest}
        return ak.scaled_dot_product_attention(q, k, v, **kw)

    return jax.eval_shape(whole, *bare).dtype


def place_on_mesh(mesh: Any, arrays: tuple[Any, ...], specs: list[Any]) -> tuple[Any, ...]:
    """Concrete arrays are put on the mesh as the specs say (``jax.device_put``); traced
    ones are resharded (``jax.reshard``) where a mesh axis of the specs is Explicit
    (``jax.make_mesh``'s default), and placed by ``shard_map`` on Auto axes."""
    import jax
    from jax.sharding import AxisType, NamedSharding

    types = dict(zip(mesh.axis_names, mesh.axis_types, strict=True))
    used = {a for spec in specs for a in tuple(spec) if a is not None}
    explicit = any(types[a] == AxisType.Explicit for a in used)
    placed = []
    for x, spec in zip(arrays, specs, strict=False):
        if not isinstance(x, jax.core.Tracer):
            # a concrete array (one device, replicated, or already sharded): put it where
            # the call needs it, which is free when it is there already (issue 26)
            x = jax.device_put(x, NamedSharding(mesh, spec))
        elif explicit:
            x = jax.reshard(x, NamedSharding(mesh, spec))
        placed.append(x)
    return tuple(placed)
