"""Checks for ring and Ulysses attention over torch.distributed, made before any work.

Each process checks its own shard (types, device, the core's validation, divisibility),
then one ``all_gather`` of a CRC of the shapes, dtype and arguments and a failure flag
tells every rank whether all agree (``all_gather_object`` fetches the details only on
disagreement). Every rank then raises the same attnkit error, so no rank hangs in a
collective the others never enter.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from array_api_compat import array_namespace

from attnkit.call_checks import CallInfo
from attnkit.call_checks import check_call as validate_call
from attnkit.errors import (
    ArgumentTypeError,
    AttnkitError,
    DeviceMismatchError,
    ParameterError,
    ShapeError,
)
from attnkit.masks import Geometry, Mask
from attnkit.options import OPTION_NAMES
from attnkit.plan import default_block_size
from attnkit.ring.plan import LAYOUTS, PlacedMask, Segments, carries_arrays, split_segments

__all__ = ["Call", "check_call"]

#: The core's options a distributed call passes to its pieces (:class:`attnkit.options.Options`)
_WHOLE_CALL_ONLY = ("dropout_p", "return_weights", "return_lse", "rng")
_CORE = tuple(n for n in OPTION_NAMES if n not in _WHOLE_CALL_ONLY)


@dataclass
class Call:
    """A checked distributed call: ``rank``/``world`` in ``group``, the global lengths
    L and S, and the core's :class:`attnkit.call_checks.CallInfo` of the local shard."""

    group: Any
    rank: int
    world: int
    L: int
    S: int
    local: CallInfo
    kwargs: dict[str, Any]
    segments: Segments | None = None  # the ring's segment ids (this shard's), if any


def check_call(
    name: str, q: Any, k: Any, v: Any, group: Any, layout: str, kwargs: dict[str, Any]
) -> Call:
    """Check one process's shard and that every process agrees; raise otherwise."""
    if not dist.is_available() or not dist.is_initialized():
        raise ParameterError(
            f"{name} needs an initialized process group: call "
            "torch.distributed.init_process_group('gloo' or 'nccl') first (torchrun does "
            "the rendezvous)."
        )
    group = dist.group.WORLD if group is None else group
    rank, world = dist.get_rank(group), dist.get_world_size(group)
    error, local, segments, mask = None, None, None, kwargs.get("attn_mask")
    try:
        local, segments, mask = _check_local(name, q, k, v, group, world, layout, kwargs)
    except AttnkitError as e:
        error = e
    text = _describe(q, k, v, layout, kwargs)
    _agree(name, group, rank, world, text, error)
    L, S = q.shape[-2] * world, k.shape[-2] * world
    kw = {n: kwargs[n] for n in kwargs if n in _CORE and n != "attn_mask"}
    if mask is not None:  # without segment ids (they travel with K/V), checked above
        kw["attn_mask"] = PlacedMask(mask) if isinstance(mask, Mask) else mask
    if kw.get("block_size") is None and local is not None:
        # The core's own choice with its score budget divided by the processes: a block
        # holds rows x (S / P) scores, so the blocks' memory falls as 1/P with the rest
        # (at the same number of blocks in all as on one process).
        kw["block_size"] = default_block_size(local, share=world)
    return Call(group, rank, world, L, S, local, kw, segments)


def _check_local(
    name: str, q: Any, k: Any, v: Any, group: Any, world: int, layout: str, kw: dict[str, Any]
) -> tuple[CallInfo, Segments | None, Any]:
    """The local shard's CallInfo, the ring's segment ids (None without) and the rest
    of ``attn_mask`` (the whole mask for Ulysses), all checked."""
    for arg, x in (("query", q), ("key", k), ("value", v)):
        if not isinstance(x, torch.Tensor):
            raise ArgumentTypeError(
                f"{name}: {arg} must be a torch.Tensor, got {type(x).__name__}."
            )
    if layout not in LAYOUTS:
        raise ParameterError(f"{name}: layout must be one of {LAYOUTS}, got {layout!r}.")
    unknown = sorted(set(kw) - set(OPTION_NAMES))
    if unknown:
        raise ParameterError(
            f"{name} got unknown keyword arguments {unknown}; it takes the core's "
            f"keyword arguments {list(_CORE)}."
        )
    if kw.get("dropout_p", 0.0) or kw.get("return_weights") or kw.get("return_lse"):
        raise ParameterError(
            f"{name} does not take dropout_p > 0, return_weights or return_lse (got "
            f"dropout_p={kw.get('dropout_p', 0.0)}, return_weights={kw.get('return_weights')},"
            f" return_lse={kw.get('return_lse')}); call attnkit.scaled_dot_product_attention "
            "on the gathered sequence for those."
        )
    mask = kw.get("attn_mask")
    if mask is not None and not isinstance(mask, Mask):
        raise ParameterError(
            f"{name}: attn_mask must be None or an attnkit.masks structure (positions are "
            f"absolute, so it applies to every shard), got a {type(mask).__name__}; express "
            "padding and documents with attnkit.masks, or fold a dense mask into score_mod."
        )
    segments = None
    if name == "ring_attention":
        segments, rest = split_segments(mask)
        for arg, m in (("attn_mask", rest), ("window", kw.get("window"))):
            if isinstance(m, Mask) and carries_arrays(m):
                raise ParameterError(
                    f"{name}: {arg}={m!r} is a mask carried by arrays (dense, array "
                    "lengths, segment ids under |), which index the call's own rows and "
                    "columns, not a ring piece's; pass attnkit.masks.segments(q_ids, "
                    "kv_ids) with this process's shards of the ids (alone or & a "
                    "positional structure), a positional structure (causal, "
                    "sliding_window, documents(lengths), global_tokens, block_sparse, "
                    "key_padding with int lengths) or is_causal/window; or use "
                    "ulysses_attention, which runs the core on the whole sequence and "
                    "takes them (with the whole sequence's arrays on every process)."
                )
        if segments is not None:
            _check_segments(name, q, k, segments)
            mask = rest
    backend = str(dist.get_backend(group))
    want = "cpu" if backend == "gloo" else "cuda" if backend == "nccl" else None
    for arg, x in (("query", q), ("key", k), ("value", v)):
        if want is not None and x.device.type != want:
            fix = ".cpu()" if want == "cpu" else ".cuda() (torch.cuda.set_device(local_rank))"
            raise DeviceMismatchError(
                f"{name}: {arg} is on device {x.device} but the process group's backend is "
                f"{backend!r}, which carries {want} tensors; move the shards with {fix} or "
                f"create the group with the backend for {x.device.type}."
            )
        if x.ndim < 2:
            raise ShapeError(
                f"{name}: {arg} has shape {tuple(x.shape)}; expected (..., H, N, E), the "
                "sequence on axis -2."
            )
    core = {n: kw[n] for n in _CORE if n in kw}
    align = core.pop("causal_alignment", "top_left")
    core.pop("attn_mask", None)
    if mask is not None:  # a structure is checked against the whole call, not the shard
        L, S = q.shape[-2] * world, k.shape[-2] * world
        whole = Geometry(L, S, kw.get("q_offset", 0), kw.get("kv_offset", 0))
        mask.check(array_namespace(q), q.device, whole, "attn_mask")
        core["attn_mask"] = PlacedMask(mask)
    if segments is not None:  # this shard's ids against this shard's queries and keys
        ids = segments.piece(segments.q_ids, segments.kv_ids)
        core["attn_mask"] = ids if mask is None else ids & core["attn_mask"]
    local = validate_call(q, k, v, core.pop("attn_mask", None), causal_alignment=align, **core)
    if layout == "zigzag":
        for arg, x in (("query", q), ("key", k)):
            if x.shape[-2] % 2:
                raise ShapeError(
                    f"{name}: {arg} has shape {tuple(x.shape)}, an odd local length "
                    f"{x.shape[-2]}, but layout='zigzag' holds two equal chunks per process; "
                    f"pad the whole sequence to a multiple of 2 * world = {2 * world} (mask "
                    "the padding) or use layout='contiguous'."
                )
    if name == "ulysses_attention":
        for arg, x in (("query", q), ("key", k)):
            heads = x.shape[-3] if x.ndim >= 3 else 1
            if x.ndim < 3 or heads % world:
                raise ShapeError(
                    f"{name}: {arg} has shape {tuple(x.shape)}, {heads} heads on axis -3, "
                    f"which do not divide by the {world} processes; Ulysses splits heads over "
                    "processes: use ring_attention instead (any head count), or a head count "
                    f"that is a multiple of {world}."
                )
    return local, segments, mask


def _check_segments(name: str, q: Any, k: Any, seg: Segments) -> None:
    """This process's segment ids: torch integer tensors on the shards' device, one id
    per local query (..., L/P) and key (..., S/P) position, in the shards' order."""
    for arg, ids, x in (("q_ids", seg.q_ids, q), ("kv_ids", seg.kv_ids, k)):
        if not isinstance(ids, torch.Tensor) or ids.device != x.device:
            where = type(ids).__name__ if not isinstance(ids, torch.Tensor) else ids.device
            raise DeviceMismatchError(
                f"{name}: attn_mask segments {arg} must be a torch tensor on {x.device} "
                f"like the shards, got {where}; move it with .to({str(x.device)!r})."
            )
        if ids.shape[-1] != x.shape[-2]:
            raise ShapeError(
                f"{name}: attn_mask segments {arg} has {ids.shape[-1]} ids on its last axis "
                f"but this process holds {x.shape[-2]} positions ({tuple(x.shape)}); pass "
                "this process's shard of the ids, in the shards' order (zigzag_shard(ids, "
                "rank, world, dim=-1) for the zigzag layout)."
            )


def _describe(q: Any, k: Any, v: Any, layout: str, kw: dict[str, Any]) -> str:
    """What every process must agree on, as text (its CRC is gathered)."""
    shapes = [tuple(getattr(x, "shape", ())) for x in (q, k, v)]
    dtypes = [str(getattr(x, "dtype", None)) for x in (q, k, v)]
    args = sorted((n, repr(kw[n])) for n in kw if n != "score_mod")
    mod = kw.get("score_mod")
    args.append(("score_mod", getattr(mod, "__qualname__", type(mod).__name__)))
    return f"shapes query/key/value {shapes}, dtypes {dtypes}, layout {layout!r}, {args}"


def _agree(name: str, group: Any, rank: int, world: int, text: str, error: Any) -> None:
    """One cheap all_gather; raise on every rank if any rank failed or disagrees."""
    device = "cuda" if str(dist.get_backend(group)) == "nccl" else "cpu"
    if device == "cuda":
        device = f"cuda:{torch.cuda.current_device()}"
    mine = torch.tensor([zlib.crc32(text.encode()), int(error is not None)], dtype=torch.int64,
                        device=device)  # fmt: skip
    every = [torch.empty_like(mine) for _ in range(world)]
    dist.all_gather(every, mine, group=group)
    table = torch.stack(every).cpu()  # (world, 2)
    if not bool(table[:, 1].any()) and bool((table[:, 0] == table[0, 0]).all()):
        return
    infos: list[Any] = [None] * world
    dist.all_gather_object(infos, (text, None if error is None else str(error)), group=group)
    if error is not None:
        raise error
    failed = [(r, msg) for r, (_, msg) in enumerate(infos) if msg is not None]
    if failed:
        r, msg = failed[0]
        raise ParameterError(f"{name}: rank {r} refused the call, so every rank stops: {msg}")
    lines = "; ".join(f"rank {r}: {t}" for r, (t, _) in enumerate(infos))
    raise ShapeError(
        f"{name}: the {world} processes disagree on the call ({lines}). Every process must "
        "pass shards of one shape (the whole length divided by the process count) and the "
        "same arguments; pad the sequence to a multiple of the process count (2x for "
        "zigzag) and shard it with zigzag_shard or equal slices."
    )
