"""Ring and Ulysses attention over 4 JAX host devices against the single-device core.

Run in the nox session ``distributed-jax`` (XLA_FLAGS=--xla_force_host_platform_device_count=4
set before JAX starts). Float64 (x64 on for this module) must match the core to 1e-12,
outputs and gradients; float32 to 2e-5 (a few ulps of O(1) outputs summed over 4 merges).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402
from attnkit.backends.jax.sharding import (  # noqa: E402
    ring_attention,
    ulysses_attention,
    zigzag_shard,
    zigzag_unshard,
)
from jax.sharding import AxisType, NamedSharding, PartitionSpec  # noqa: E402

import attnkit as ak  # noqa: E402

P = 4
TOL64, TOL32 = 1e-12, 2e-5
pytestmark = pytest.mark.skipif(
    jax.device_count() < P,
    reason="needs 4 JAX devices: XLA_FLAGS=--xla_force_host_platform_device_count=4 "
    "(the nox session distributed-jax sets it)",
)


@pytest.fixture(scope="module", autouse=True)
def x64() -> Iterator[None]:
    """64-bit JAX for this module only (restored afterwards)."""
    before = jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", True)
    yield
    jax.config.update("jax_enable_x64", before)


def _mesh(parts: int = P, explicit: bool = False) -> Any:
    kind = AxisType.Explicit if explicit else AxisType.Auto
    return jax.sharding.Mesh(np.array(jax.devices()[:parts]), ("seq",), axis_types=(kind,))


def _inputs(shape_q: tuple, shape_kv: tuple, ev: int, dtype: Any, seed: int = 0) -> tuple:
    rng = np.random.default_rng(seed)
    shapes = (shape_q, shape_kv, (*shape_kv[:-1], ev), (*shape_q[:-1], ev))
    return tuple(jnp.asarray(rng.standard_normal(s), dtype=dtype) for s in shapes)


def _np(x: Any) -> np.ndarray:
    return np.asarray(jax.device_put(x, jax.devices()[0]))


def _sharded(fn: Any, layout: str, mesh: Any, kw: dict) -> Any:
    """fn on natural-order arrays: zigzag in, the sharded call, zigzag out."""
    zz = (lambda x: zigzag_shard(x, P)) if layout == "zigzag" else (lambda x: x)
    uz = (lambda x: zigzag_unshard(x, P)) if layout == "zigzag" else (lambda x: x)
    return lambda q, k, v: uz(fn(zz(q), zz(k), zz(v), mesh=mesh, axis="seq", layout=layout, **kw))


def _out_and_grads(attend: Any, q: Any, k: Any, v: Any, ct: Any) -> tuple[Any, ...]:
    """(out, dq, dk, dv) of ``sum(attend(q, k, v) * ct)``, one jitted program."""

    def both(q: Any, k: Any, v: Any, ct: Any) -> tuple[Any, ...]:
        out, pullback = jax.vjp(attend, q, k, v)
        return (out, *pullback(ct))

    return tuple(_np(x) for x in jax.jit(both)(q, k, v, ct))


def _core(q: Any, k: Any, v: Any, ct: Any, kw: dict) -> tuple[np.ndarray, ...]:
    """The single-device core on NumPy (its array-API backward, attention_vjp)."""
    out, vjp = ak.attention_vjp(_np(q), _np(k), _np(v), **kw)
    return (out, *vjp(_np(ct)))


def _compare(got: tuple, want: tuple, tol: float, what: str) -> None:
    for name, g, w in zip(("out", "dq", "dk", "dv"), got, want, strict=True):
        assert not np.isnan(g).any(), f"{what}: NaN in {name}"
        err = float(np.max(np.abs(g - w)))
        assert err <= tol, f"{what}: {name} differs by {err:.3e} > {tol:.1e}, shape {g.shape}"


CASES = [
    # (name, layout, core kwargs, q shape, kv shape, Ev)
    (
        "window-alibi-contiguous",
        "contiguous",
        {"window": (5, 2), "score_mod": ak.score_mods.alibi(2)},
        (1, 2, 64, 8),
        (1, 2, 64, 8),
        6,
    ),
    (
        "documents-causal-gqa",
        "zigzag",
        {"is_causal": True, "enable_gqa": True, "attn_mask": ak.masks.documents([7, 33, 24])},
        (1, 4, 64, 8),
        (1, 2, 64, 8),
        8,
    ),
    # kv_offset 8: query rows 0..7 see no key (fully masked, all in shard 0 of zigzag);
    # batch 1's key padding of 0 empties every row of that batch entry
    (
        "empty-rows",
        "zigzag",
        {"is_causal": True, "kv_offset": 8, "attn_mask": ak.masks.key_padding([70, 0])},
        (2, 1, 64, 8),
        (2, 1, 64, 8),
        8,
    ),
    ("no-mask-L!=S", "contiguous", {"q_offset": 3}, (1, 2, 32, 8), (1, 2, 64, 8), 8),
    # issue 26: a score_mod with no causal, window or mask raised AttributeError
    (
        "alibi-alone-zigzag",
        "zigzag",
        {"score_mod": ak.score_mods.alibi(2)},
        (1, 2, 64, 8),
        (1, 2, 64, 8),
        8,
    ),
    (
        "softcap-alone-L!=S",
        "contiguous",
        {"score_mod": ak.score_mods.softcap(2.0), "kv_offset": 5},
        (1, 2, 32, 8),
        (1, 2, 64, 8),
        6,
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_ring_matches_core_float64(case: tuple) -> None:
    name, layout, kw, sq, skv, ev = case
    q, k, v, ct = _inputs(sq, skv, ev, jnp.float64)
    want = _core(q, k, v, ct, kw)
    got = _out_and_grads(_sharded(ring_attention, layout, _mesh(), kw), q, k, v, ct)
    _compare(got, want, TOL64, f"ring {name}")
    if name == "empty-rows":
        assert np.all(got[0][:, :, :8] == 0) and np.all(got[0][1] == 0), "empty rows not 0"
        assert np.all(got[1][:, :, :8] == 0) and np.all(got[1][1] == 0), "their dq not 0"
        assert np.any(got[0][0, :, 8:] != 0)


def test_ring_float32_within_tolerance() -> None:
    q, k, v, ct = _inputs((1, 2, 128, 16), (1, 2, 128, 16), 16, jnp.float32, seed=1)
    kw = {"is_causal": True}
    gold = _core(*(x.astype(jnp.float64) for x in (q, k, v, ct)), kw)
    got = _out_and_grads(_sharded(ring_attention, "zigzag", _mesh(), kw), q, k, v, ct)
    _compare(tuple(x.astype(np.float64) for x in got), gold, TOL32, "ring float32")


def test_ulysses_matches_core() -> None:
    kw = {"is_causal": True, "enable_gqa": True, "window": (9, 0)}
    q, k, v, ct = _inputs((1, 8, 64, 8), (1, 4, 64, 8), 8, jnp.float64, seed=2)
    want = _core(q, k, v, ct, kw)
    got = _out_and_grads(_sharded(ulysses_attention, "zigzag", _mesh(), kw), q, k, v, ct)
    _compare(got, want, TOL64, "ulysses")


def test_explicit_mesh_under_set_mesh() -> None:
    mesh = _mesh(explicit=True)
    q, k, v, ct = _inputs((1, 2, 64, 8), (1, 2, 64, 8), 8, jnp.float64, seed=3)
    want = _core(q, k, v, ct, {"window": 3})
    with jax.set_mesh(mesh):
        got = _out_and_grads(
            _sharded(ring_attention, "contiguous", mesh, {"window": 3}), q, k, v, ct
        )
    _compare(got, want, TOL64, "ring on an Explicit mesh")


def _spec(ndim: int) -> PartitionSpec:
    return PartitionSpec(*([None] * (ndim - 2)), "seq", None)


def test_ring_hlo_is_point_to_point_without_gathering_kv() -> None:
    mesh = _mesh()
    q, k, v, ct = _inputs((1, 2, 128, 8), (1, 2, 128, 8), 8, jnp.float32)
    q, k, v, ct = (jax.device_put(x, NamedSharding(mesh, _spec(4))) for x in (q, k, v, ct))

    def attend(q: Any, k: Any, v: Any) -> Any:
        return ring_attention(q, k, v, mesh=mesh, axis="seq", is_causal=True)

    def train(q: Any, k: Any, v: Any) -> Any:
        return jax.grad(lambda q, k, v: jnp.sum(attend(q, k, v) * ct), (0, 1, 2))(q, k, v)

    for what, fn in (("forward+backward", train),):  # the forward is inside
        hlo = jax.jit(fn).lower(q, k, v).compile().as_text()
        assert "collective-permute" in hlo, f"{what}: no collective-permute in the HLO"
        for collective in ("all-gather", "all-to-all", "all-reduce"):
            assert collective not in hlo, f"{what}: {collective} in the ring's HLO"


def test_batch_head_parallel_core_has_no_collective() -> None:
    """The unchanged core under jit keeps a (batch, heads) NamedSharding: no collective
    moves arrays. Unmasked, the compiled program has no collective at all. With a mask
    (causal) the core asks once whether the operands are all finite (so that masked
    NaN/inf cannot leak, see attnkit.blocked.backward), a reduce over the whole array
    that XLA runs as an all-reduce of one bool (pred[]) per mesh axis: the only
    collective allowed here, and it carries no attention data."""
    mesh = jax.sharding.Mesh(
        np.array(jax.devices()[:P]).reshape(2, 2), ("data", "heads"),
        axis_types=(AxisType.Auto, AxisType.Auto),
    )  # fmt: skip
    spec = NamedSharding(mesh, PartitionSpec("data", "heads", None, None))
    q, k, v, _ = _inputs((2, 4, 32, 8), (2, 4, 32, 8), 8, jnp.float32)
    q, k, v = (jax.device_put(x, spec) for x in (q, k, v))
    for kw in ({}, {"is_causal": True}, {"is_causal": True, "impl": "generic"}):
        fn = jax.jit(lambda q, k, v, kw=kw: ak.scaled_dot_product_attention(q, k, v, **kw))
        hlo = fn.lower(q, k, v).compile().as_text()
        for collective in ("all-gather", "all-to-all", "collective-permute"):
            assert collective not in hlo, f"{collective} in the batch/head-parallel HLO ({kw})"
        reduces = [line for line in hlo.splitlines() if "= " in line and " all-reduce(" in line]
        if not kw:
            assert not reduces, f"all-reduce in the unmasked core's HLO: {reduces}"
        assert all(line.split("= ")[1].startswith("pred[] ") for line in reduces), reduces
        assert fn(q, k, v).sharding.spec == spec.spec


def test_peak_memory_falls_as_one_over_p() -> None:
    """Per-device peak (arguments + outputs + temporaries - aliased, from the compiled
    program's memory_analysis) of causal ring attention at L = 256, forward and
    forward+backward: P = 2 at most 0.5 x P = 1, P = 4 at most 0.3 x P = 1."""
    from attnkit.app.bench.sharding_jax import measure

    arrays = _inputs((1, 2, 256, 16), (1, 2, 256, 16), 16, jnp.float32)
    for backward in (False, True):
        peaks = {
            p: measure(p, arrays, backward=backward, repeats=0, is_causal=True)[
                "peak_bytes_per_device"
            ]
            for p in (1, 2, 4)
        }
        ratios = {p: peaks[p] / peaks[1] for p in (2, 4)}
        assert ratios[2] <= 0.5 and ratios[4] <= 0.3, f"backward={backward}: {peaks}, {ratios}"


def test_window_skips_pairs_outside_the_window() -> None:
    """A window narrower than a shard: contiguous layout needs only steps 0 and 1 (its
    own shard and the previous one); every other (device, step) pair is skipped."""
    from attnkit.backends.jax.sharding.steps import RingPlan

    from attnkit.ring.plan import ring_structure, shard_pieces

    pieces = shard_pieces("contiguous", P, 64)
    plan = RingPlan("seq", P, pieces, pieces, 0, 0, ring_structure(False, (5, 0), "top_left", None))
    live = {(r, t) for r in range(P) for t in range(P) if plan.live_pairs(r, (r - t) % P)}
    assert live == {(r, 0) for r in range(P)} | {(r, 1) for r in range(1, P)}
    causal = RingPlan("seq", P, *(2 * [shard_pieces("zigzag", P, 64)]), 0, 0,
                      ring_structure(True, None, "top_left", None))  # fmt: skip
    work = [sum(len(causal.live_pairs(r, s)) for s in range(P)) for r in range(P)]
    # zigzag: every device does the same work, 3 pairs with its own keys (two diagonal
    # chunk pairs, one full) and 2 full chunk pairs with each other shard's
    assert work == [2 * P + 1] * P


def test_zigzag_round_trip() -> None:
    x = jnp.arange(2 * 16 * 3).reshape(2, 16, 3)
    y = zigzag_shard(x, 2)
    assert _np(y)[0, :, 0].tolist() == [0, 3, 6, 9, 36, 39, 42, 45, 12, 15, 18, 21, 24, 27, 30, 33]
    assert np.array_equal(_np(zigzag_unshard(y, 2)), _np(x))


def _mesh2(names: tuple[str, str]) -> Any:
    """A 2 x 2 mesh of the 4 devices: names[0] x names[1]."""
    devices = np.array(jax.devices()[:P]).reshape(2, 2)
    return jax.sharding.Mesh(devices, names, axis_types=(AxisType.Auto, AxisType.Auto))


def _zz2(x: Any) -> Any:
    return zigzag_shard(x, 2)


LEAD_CASES = [
    # (name, fn, mesh axes, lead_axes, core kwargs, q shape, kv shape)
    ("batch-causal", ring_attention, ("data", "seq"), ("data",), {"is_causal": True},
     (2, 2, 32, 8), (2, 2, 32, 8)),
    ("heads-gqa-window", ring_attention, ("heads", "seq"), (None, "heads"),
     {"enable_gqa": True, "window": (5, 3), "is_causal": True}, (1, 4, 32, 8), (1, 2, 32, 8)),
    ("batch-alibi-documents", ring_attention, ("data", "seq"), ("data", None),
     {"score_mod": ak.score_mods.alibi(2), "attn_mask": ak.masks.documents([9, 23])},
     (4, 2, 32, 8), (4, 2, 32, 8)),
    ("ulysses-batch", ulysses_attention, ("data", "seq"), ("data",), {"is_causal": True},
     (2, 4, 32, 8), (2, 4, 32, 8)),
    ("ulysses-heads", ulysses_attention, ("heads", "seq"), (None, "heads"),
     {"is_causal": True, "enable_gqa": True}, (1, 8, 32, 8), (1, 4, 32, 8)),
]  # fmt: skip


@pytest.mark.parametrize("case", LEAD_CASES, ids=[c[0] for c in LEAD_CASES])
def test_sequence_parallel_beside_batch_or_head_parallel(case: tuple) -> None:
    """A 2 x 2 mesh: batch or heads over one axis, the ring (or Ulysses) over the other;
    outputs and gradients equal the single-device core in float64."""
    name, fn, names, lead, kw, sq, skv = case
    mesh = _mesh2(names)
    q, k, v, ct = _inputs(sq, skv, 8, jnp.float64, seed=5)
    want = _core(q, k, v, ct, kw)

    def attend(q: Any, k: Any, v: Any) -> Any:
        out = fn(_zz2(q), _zz2(k), _zz2(v), mesh=mesh, axis="seq", lead_axes=lead, **kw)
        return zigzag_unshard(out, 2)

    _compare(_out_and_grads(attend, q, k, v, ct), want, TOL64, name)


def test_batch_and_ring_hlo_and_output_sharding() -> None:
    """Batch over "data", ring over "seq": the output keeps PartitionSpec("data", None,
    "seq", None), and the forward+backward program's only collectives are the ring's
    collective-permutes (nothing gathered across either axis)."""
    mesh = _mesh2(("data", "seq"))
    spec = NamedSharding(mesh, PartitionSpec("data", None, "seq", None))
    q, k, v, ct = _inputs((2, 2, 64, 8), (2, 2, 64, 8), 8, jnp.float32, seed=6)
    q, k, v, ct = (jax.device_put(x, spec) for x in (q, k, v, ct))

    def attend(q: Any, k: Any, v: Any) -> Any:
        return ring_attention(q, k, v, mesh=mesh, axis="seq", lead_axes=("data",), is_causal=True)

    out = jax.jit(attend)(q, k, v)
    assert out.sharding.spec == spec.spec, out.sharding.spec
    shard = out.addressable_shards[0].data
    assert shard.shape == (1, 2, 32, 8), shard.shape

    def train(q: Any, k: Any, v: Any) -> Any:
        return jax.grad(lambda q, k, v: jnp.sum(attend(q, k, v) * ct), (0, 1, 2))(q, k, v)

    hlo = jax.jit(train).lower(q, k, v).compile().as_text()
    assert "collective-permute" in hlo, "no collective-permute in the HLO"
    for collective in ("all-gather", "all-to-all", "all-reduce"):
        assert collective not in hlo, f"{collective} in the batch x ring HLO"


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_ring_16bit_within_4x_the_cores_error(dtype: str) -> None:
    """16-bit ring outputs and gradients: merges and the dq/dk/dv sums run in float32
    (only each step's result is rounded to 16 bits), so the error against float64 of the
    same rounded inputs stays within 4x the one-device core's own (PyTorch's rule for
    its low-precision kernels)."""
    dt = getattr(jnp, dtype)
    q, k, v, ct = (x.astype(dt) for x in _inputs((1, 4, 128, 16), (1, 4, 128, 16), 16,
                                                   jnp.float32, seed=7))  # fmt: skip
    kw = {"is_causal": True}
    gold = _core(*(x.astype(jnp.float64) for x in (q, k, v, ct)), kw)
    ring = _out_and_grads(_sharded(ring_attention, "zigzag", _mesh(), kw), q, k, v, ct)

    def core(q: Any, k: Any, v: Any) -> Any:
        return ak.scaled_dot_product_attention(q, k, v, **kw)

    one = _out_and_grads(core, q, k, v, ct)
    for name, r, o, g in zip(("out", "dq", "dk", "dv"), ring, one, gold, strict=True):
        assert r.dtype == np.dtype(dt), f"{name} came back as {r.dtype}, not {dtype}"
        err = float(np.max(np.abs(r.astype(np.float64) - g)))
        allowed = 4 * float(np.max(np.abs(o.astype(np.float64) - g))) + 1e-6
        assert err <= allowed, f"{dtype} {name}: ring error {err:.3g} > allowed {allowed:.3g}"


def _ids(batch: int, n: int, docs: tuple[int, ...]) -> jnp.ndarray:
    """(batch, n) segment ids: entry b packs docs[b] documents of about equal length."""
    rows = [np.minimum(np.arange(n) * d // n, d - 1)[:: 1 if b % 2 == 0 else -1]
            for b, d in enumerate(docs[:batch])]  # fmt: skip
    return jnp.asarray(np.stack(rows), dtype=jnp.int32)


@pytest.mark.parametrize(
    ("layout", "kw", "with_structure"),
    [
        ("zigzag", {"is_causal": True}, False),
        ("contiguous", {"window": (7, 3)}, True),
        ("zigzag", {"is_causal": True, "enable_gqa": True}, True),
    ],
)
def test_ring_with_segment_ids(layout: str, kw: dict, with_structure: bool) -> None:
    """Packed documents by segment ids (a different packing per batch entry): the ids
    are sharded like the sequence and the key ids travel with K and V; outputs and
    gradients equal the one-device core in float64, with or without & a structure."""
    hq = 4 if kw.get("enable_gqa") else 2
    q, k, v, ct = _inputs((2, hq, 64, 8), (2, 2, 64, 8), 8, jnp.float64, seed=8)
    ids = _ids(2, 64, (5, 3))
    extra = ak.masks.documents([20, 44]) if with_structure else None
    seg_np = ak.masks.segments(np.asarray(ids))  # the core's reference runs on NumPy
    whole = seg_np if extra is None else seg_np & extra
    want = _core(q, k, v, ct, {**kw, "attn_mask": whole})
    zz = (lambda x, axis=-2: zigzag_shard(x, P, axis)) if layout == "zigzag" else (
        lambda x, axis=-2: x)  # fmt: skip
    uz = (lambda x: zigzag_unshard(x, P)) if layout == "zigzag" else (lambda x: x)
    mine = ak.masks.segments(zz(ids, -1))  # the ids in the arrays' order
    mask = mine if extra is None else mine & extra

    def attend(q: Any, k: Any, v: Any) -> Any:
        out = ring_attention(zz(q), zz(k), zz(v), mesh=_mesh(), axis="seq", layout=layout,
                             attn_mask=mask, **kw)  # fmt: skip
        return uz(out)

    got = _out_and_grads(attend, q, k, v, ct)
    _compare(got, want, TOL64, f"ring segments {layout} {kw}")


def test_ring_segment_ids_hlo_sends_ids_not_gathers() -> None:
    """The key ids ride the ring with K and V: the forward+backward program still has
    only collective-permutes."""
    mesh = _mesh()
    q, k, v, ct = _inputs((2, 2, 64, 8), (2, 2, 64, 8), 8, jnp.float32, seed=9)
    ids = _ids(2, 64, (4, 2))

    def train(q: Any, k: Any, v: Any, ids: Any) -> Any:
        def loss(q: Any, k: Any, v: Any) -> Any:
            out = ring_attention(q, k, v, mesh=mesh, axis="seq", layout="contiguous",
                                 attn_mask=ak.masks.segments(ids), is_causal=True)  # fmt: skip
            return jnp.sum(out * ct)

        return jax.grad(loss, (0, 1, 2))(q, k, v)

    hlo = jax.jit(train).lower(q, k, v, ids).compile().as_text()
    assert "collective-permute" in hlo
    for collective in ("all-gather", "all-to-all", "all-reduce"):
        assert collective not in hlo, f"{collective} in the segments ring's HLO"
