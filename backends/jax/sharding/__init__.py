"""Attention sharded over JAX devices: batch/head parallel, ring and Ulysses sequence
parallel, forward and backward, on attnkit's core.

Shape legend: ``...`` leading dims, Hq/Hkv heads, L queries, S keys, E features, Ev value
features, P devices along the mesh axis ``axis``.

**Batch/head parallel** needs nothing from this module: the unchanged core under
``jax.jit`` keeps a ``NamedSharding`` over batch and head axes, with no collective.

**Ring attention** (:func:`ring_attention`, :mod:`.steps`): every device keeps its query
shard; K/V shards travel around the ring (device r sends to r + 1), one step per shard,
each step the core at the pieces' absolute offsets, merged by log-sum-exp::

    device:    0        1        2        3          K/V move  0 -> 1 -> 2 -> 3 -> 0
    step 0:   K0       K1       K2       K3
    step 1:   K3       K0       K1       K2
    ...

    out_r = merge_partials([core(q_r, K_s, V_s) for s in 0..P-1])   (exact attention)

Per-device memory: O((L + S) / P). Pairs the structure masks entirely are not computed.
The backward pass is a ``jax.custom_vjp`` saving only ``(out, lse)`` (:mod:`.steps`).

**Both at once**: ``ring_attention(..., axis="seq", lead_axes=("data",))`` on a mesh
("data", "seq"): each "data" group runs its own ring over "seq".

**Ulysses** (:func:`ulysses_attention`, :mod:`.ulysses`): sequence shards traded for
head shards around the unchanged core; Hq and Hkv must divide by P.

Layouts (:mod:`attnkit.ring.plan`): ``"contiguous"``, or ``"zigzag"`` (the default): the
caller's arrays are already in zigzag order (:func:`zigzag_shard`), and so is the output.

Masks: ``is_causal``, ``window``, ``q_offset``/``kv_offset`` and positional
``attnkit.masks`` structures apply by absolute position, exactly as on one device.
Segment ids (``masks.segments``; the whole sequence's ids in the arrays' order) are
sharded like the sequence (ring only). Other masks carried by arrays, dropout,
``return_lse``/``return_weights`` are refused (``ParameterError``).
A query row with no key gives output 0 and gradient 0, never NaN.
With 16-bit inputs the merges, the gradient sums and the travelling dK, dV are float32.

Errors are raised before any work (:mod:`.checks`). Several hosts:
``jax.distributed.initialize(...)`` before the mesh is made. The README has a
paste-and-run script on 4 host devices of one CPU machine.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from attnkit.errors import ParameterError, ShapeError
from attnkit.ring.plan import ring_structure, shard_pieces

from .checks import check_lead_axes, check_mesh_axis
from .prepare import place_on_mesh, prepare
from .steps import RingPlan, ring_backward, ring_forward
from .ulysses import ulysses_body
from .zigzag import zigzag_shard, zigzag_unshard

__all__ = ["ring_attention", "ulysses_attention", "zigzag_shard", "zigzag_unshard"]


def ring_attention(
    q: Any,
    k: Any,
    v: Any,
    *,
    mesh: Any,
    axis: str,
    layout: str = "zigzag",
    lead_axes: tuple[str | None, ...] = (),
    **core_kwargs: Any,
) -> Any:
    """Ring attention over mesh axis ``axis``: exact ``scaled_dot_product_attention(q, k,
    v, **core_kwargs)`` with the sequence axis (-2) sharded over its P devices.

    Args:
        q: (..., Hq, L, E), k: (..., Hkv, S, E), v: (..., Hkv, S, Ev): global arrays,
            sequence-sharded as ``PartitionSpec(None, ..., axis, None)`` with
            ``jax.device_put``, on an Explicit (``jax.make_mesh``'s default) or Auto mesh,
            eagerly or under ``jax.jit``, inside ``jax.set_mesh(mesh)`` or not; replicated
            arrays are resharded so, and so are one-device arrays passed eagerly (under
            ``jax.jit`` or ``jax.grad`` JAX refuses to mix a one-device array with the
            mesh's devices: ``jax.device_put`` it first); L and S divisible
            by 2P for ``layout="zigzag"`` (then in zigzag order), by P for "contiguous".
        mesh: a ``jax.sharding.Mesh``; axis: one of its axis names.
        lead_axes: mesh axes (or None) of the first leading dims, from the left, for
            batch or head parallelism beside the ring: with a mesh ("data", "seq"),
            ``lead_axes=("data",)`` expects ``PartitionSpec("data", None, "seq", None)``
            for (B, H, L, E); each device then runs the ring over ``axis`` on its own
            batch entries (or heads). Sharded dims must be equal in q, k, v (the head dim
            under GQA: each divisible), with no broadcasting; heads sharded exclude a
            ``score_mod``, and masks must not vary along a sharded dim.
        core_kwargs: the core's ``is_causal``, ``window``, ``attn_mask`` (a positional
            ``attnkit.masks`` structure), ``scale``, ``enable_gqa``,
            ``causal_alignment``, ``q_offset``, ``kv_offset``, ``score_mod``, ``impl``,
            ``block_size``.

    Returns:
        out (..., Hq, L, Ev), sharded (and ordered) like ``q``. Differentiable
        (``jax.grad``) through a ``custom_vjp`` that saves only ``(out, lse)``.

    Equivalent to (one device, natural order)::

        out = attnkit.scaled_dot_product_attention(q, k, v, **core_kwargs)

    Raises ``ShapeError`` (lengths not divisible), ``ParameterError`` (unknown mesh axis,
    a wrong sharding, unsupported arguments) before any work.
    """
    import jax

    parts, specs, core, (q, k, v), out_dtype, segments = prepare(
        "ring_attention", q, k, v, mesh, axis, layout, lead_axes, core_kwargs
    )
    q_offset, kv_offset = core.pop("q_offset", 0), core.pop("kv_offset", 0)
    structure = ring_structure(
        core.get("is_causal", False),
        core.get("window"),
        core.get("causal_alignment", "top_left"),
        core.get("attn_mask"),
    )
    positional = structure is not None or core.get("score_mod") is not None or segments is not None
    # positions matter only where a structure or score_mod reads them; otherwise every
    # shard is one contiguous block (one core call per step, no switch)
    piece_layout = layout if positional else "contiguous"
    plan = RingPlan(
        axis=axis,
        parts=parts,
        q_pieces=shard_pieces(piece_layout, parts, q.shape[-2]),
        k_pieces=shard_pieces(piece_layout, parts, k.shape[-2]),
        q_offset=q_offset,
        kv_offset=kv_offset,
        structure=structure,
        core_kwargs=core,
        segments=None if segments is None else segments[0].lead,
    )
    qs, ks, vs, os, ls = specs
    ids: tuple[Any, ...] = ()  # (q_ids, kv_ids) of segments: inputs beside q, k, v
    id_specs: tuple[Any, ...] = ()
    if segments is not None:
        ids, id_specs = (segments[0].q_ids, segments[0].kv_ids), tuple(segments[1])
    # under jax.jit even when called eagerly: an eager shard_map runs its body operation
    # by operation (about 10 s for the smallest ring on 4 host devices; compiled, < 1 s)
    forward = jax.jit(jax.shard_map(
        partial(ring_forward, plan), mesh=mesh, in_specs=(qs, ks, vs, *id_specs),
        out_specs=(os, ls), check_vma=False,
    ))  # fmt: skip
    backward = jax.jit(jax.shard_map(
        partial(ring_backward, plan), mesh=mesh, in_specs=(qs, ks, vs, os, ls, os, *id_specs),
        out_specs=(qs, ks, vs), check_vma=False,
    ))  # fmt: skip

    @jax.custom_vjp
    def attend(q: Any, k: Any, v: Any, *ids: Any) -> Any:
        return forward(q, k, v, *ids)[0].astype(out_dtype)

    def attend_fwd(q: Any, k: Any, v: Any, *ids: Any) -> tuple[Any, tuple[Any, ...]]:
        out, lse = forward(q, k, v, *ids)  # (..., Hq, L, Ev), (..., Hq, L), sequence-sharded
        # out stays in the compute dtype for the backward (float32 for 16-bit inputs)
        return out.astype(out_dtype), (q, k, v, out, lse, ids)

    def attend_bwd(saved: tuple[Any, ...], d_out: Any) -> tuple[Any, ...]:
        *arrays, ids = saved
        (d_out,) = place_on_mesh(mesh, (d_out,), [os])  # an Explicit mesh: as out
        return (*backward(*arrays, d_out, *ids), *(None for _ in ids))  # ids: no gradient

    attend.defvjp(attend_fwd, attend_bwd)
    return attend(q, k, v, *ids)


def ulysses_attention(
    q: Any,
    k: Any,
    v: Any,
    *,
    mesh: Any,
    axis: str,
    layout: str = "zigzag",
    lead_axes: tuple[str | None, ...] = (),
    **core_kwargs: Any,
) -> Any:
    """Ulysses attention over mesh axis ``axis``: the same contract as
    :func:`ring_attention` (arguments, layouts, result, errors), computed by trading the
    sequence shards for head shards (``all_to_all``), running the core on the whole
    sequence for Hq/P heads, and trading back. Needs a head axis (rank >= 3) with Hq and
    Hkv divisible by P (else ``ShapeError``: use :func:`ring_attention`); masks with a
    per-head axis and ``score_mod`` (which sees head indices) are refused
    (``ParameterError``). Differentiable by JAX's own autodiff.

    Equivalent to ``attnkit.scaled_dot_product_attention(q, k, v, **core_kwargs)``.
    """
    import jax

    fn = "ulysses_attention"
    parts = check_mesh_axis(mesh, axis, fn)
    arrays = {"query": q, "key": k, "value": v}
    if all(isinstance(x, jax.Array) for x in arrays.values()):
        lead = check_lead_axes(fn, mesh, axis, lead_axes, arrays, core_kwargs)
    else:
        lead = ()  # _prepare names the wrong type
    for name, x in arrays.items():
        heads = x.shape[-3] if getattr(x, "ndim", 0) >= 3 else None
        split = 1  # devices the heads are already sharded over (lead_axes)
        if heads is not None and len(lead) > x.ndim - 3 and lead[x.ndim - 3] is not None:
            split = int(mesh.shape[lead[x.ndim - 3]])
        if heads is None or (heads // split) % parts:
            by = lead[x.ndim - 3] if split > 1 else None
            local = "" if by is None else f" ({heads // split} per device of {by!r})"
            why = (
                "it has no head axis (rank < 3)"
                if heads is None
                else f"{heads} heads{local} do not divide by that"
            )
            raise ShapeError(
                f"{fn} got {name} of shape {tuple(getattr(x, 'shape', ()))}: Ulysses splits "
                f"the head axis (-3) over the {parts} devices of mesh axis {axis!r}, and "
                f"{why}; use ring_attention (any head count), or a mesh axis whose size "
                "divides the heads."
            )
    if core_kwargs.get("score_mod") is not None:
        raise ParameterError(
            f"{fn} got a score_mod; Ulysses gives each device a slice of the heads, so a "
            "score_mod's head index would be local: use ring_attention with score_mods."
        )
    parts, specs, core, (q, k, v), _, _ = prepare(
        fn, q, k, v, mesh, axis, layout, lead_axes, core_kwargs
    )
    mask = core.get("attn_mask")
    lead = getattr(mask, "lead", ())
    if lead and lead[-1] != 1:
        raise ParameterError(
            f"{fn} got attn_mask {mask!r} with a head axis of {lead[-1]} (mask leading dims "
            f"{lead}); Ulysses splits the heads, so pass a mask shared by the heads, or use "
            "ring_attention."
        )
    body = partial(ulysses_body, axis=axis, parts=parts, layout=layout, core_kwargs=core)
    qs, ks, vs, os, _ = specs
    # under jax.jit even when called eagerly (an eager shard_map runs op by op)
    run = jax.shard_map(body, mesh=mesh, in_specs=(qs, ks, vs), out_specs=os, check_vma=False)
    return jax.jit(run)(q, k, v)
