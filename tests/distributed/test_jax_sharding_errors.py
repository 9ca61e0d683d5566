"""Sequence-parallel calls on bad input raise attnkit's typed errors before any work,
each message naming the argument, its shape or value, and the fix."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402
from attnkit.backends.jax.sharding import (  # noqa: E402
    ring_attention,
    ulysses_attention,
    zigzag_shard,
)
from jax.sharding import AxisType, NamedSharding, PartitionSpec  # noqa: E402

import attnkit as ak  # noqa: E402
from attnkit.errors import ArgumentTypeError, ParameterError, ShapeError  # noqa: E402

P = 4
pytestmark = pytest.mark.skipif(
    jax.device_count() < P,
    reason="needs 4 JAX devices: XLA_FLAGS=--xla_force_host_platform_device_count=4 "
    "(the nox session distributed-jax sets it)",
)


@pytest.fixture(scope="module")
def mesh() -> Any:
    return jax.sharding.Mesh(np.array(jax.devices()[:P]), ("seq",), axis_types=(AxisType.Auto,))


def _qkv(L: int = 64, H: int = 4, S: int | None = None) -> tuple[Any, Any, Any]:
    rng = np.random.default_rng(0)
    S = L if S is None else S
    q = jnp.asarray(rng.standard_normal((1, H, L, 8)), dtype=jnp.float32)
    k = jnp.asarray(rng.standard_normal((1, H, S, 8)), dtype=jnp.float32)
    return q, k, k


BOTH = pytest.mark.parametrize("fn", [ring_attention, ulysses_attention], ids=["ring", "ulysses"])


@BOTH
def test_length_not_divisible(fn: Any, mesh: Any) -> None:
    q, k, v = _qkv(L=60)
    with pytest.raises(
        ShapeError,
        match=r"query of shape \(1, 4, 60, 8\).*length 60.*pad it to a multiple of 8 \(64",
    ):
        fn(q, k, v, mesh=mesh, axis="seq")
    q, k, v = _qkv(L=62)
    with pytest.raises(ShapeError, match=r"length 62.*layout='contiguous'.*multiple of 4 \(64"):
        fn(q, k, v, mesh=mesh, axis="seq", layout="contiguous")


def test_ulysses_heads_not_divisible(mesh: Any) -> None:
    q, k, v = _qkv(H=6)
    with pytest.raises(
        ShapeError, match=r"query of shape \(1, 6, 64, 8\).*6 heads.*use ring_attention"
    ):
        ulysses_attention(q, k, v, mesh=mesh, axis="seq")


@BOTH
def test_missing_mesh_axis(fn: Any, mesh: Any) -> None:
    q, k, v = _qkv()
    with pytest.raises(ParameterError, match=r"axis='sequence'.*its axes: \('seq',\)"):
        fn(q, k, v, mesh=mesh, axis="sequence")


def test_not_a_mesh() -> None:
    q, k, v = _qkv()
    with pytest.raises(ArgumentTypeError, match=r"jax\.sharding\.Mesh"):
        ring_attention(q, k, v, mesh=None, axis="seq")


def test_mismatched_sharding(mesh: Any) -> None:
    q, k, v = _qkv()
    k = jax.device_put(k, NamedSharding(mesh, PartitionSpec(None, "seq", None, None)))
    with pytest.raises(
        ParameterError,
        match=r"key of shape \(1, 4, 64, 8\) sharded as PartitionSpec\(None, 'seq'.*expects "
        r"PartitionSpec\(None, None, 'seq', None\)",
    ):
        ring_attention(q, k, v, mesh=mesh, axis="seq")


def test_array_masks_dropout_and_unknown_arguments_refused(mesh: Any) -> None:
    q, k, v = _qkv()
    dense = jnp.ones((64, 64), dtype=bool)
    with pytest.raises(ParameterError, match=r"attn_mask=an array of shape \(64, 64\).*positional"):
        ring_attention(q, k, v, mesh=mesh, axis="seq", attn_mask=dense)
    ids = jnp.zeros((1, 64), dtype=jnp.int32)
    with pytest.raises(ParameterError, match=r"segments.*carried by arrays"):
        ulysses_attention(q, k, v, mesh=mesh, axis="seq", attn_mask=ak.masks.segments(ids))
    with pytest.raises(ParameterError, match=r"dropout_p=0\.1"):
        ring_attention(q, k, v, mesh=mesh, axis="seq", dropout_p=0.1)
    with pytest.raises(ParameterError, match="return_lse"):
        ring_attention(q, k, v, mesh=mesh, axis="seq", return_lse=True)
    with pytest.raises(ParameterError, match="layout='striped'"):
        ring_attention(q, k, v, mesh=mesh, axis="seq", layout="striped")


def test_bottom_right_with_unequal_lengths_refused(mesh: Any) -> None:
    q, k, v = _qkv(L=32, S=64)
    with pytest.raises(ParameterError, match=r"L = 32 queries and S = 64 keys.*q_offset"):
        ring_attention(q, k, v, mesh=mesh, axis="seq", is_causal=True,
                       causal_alignment="bottom_right")  # fmt: skip


def test_core_checks_run_on_the_whole_call(mesh: Any) -> None:
    q, k, v = _qkv()
    with pytest.raises(ShapeError, match="features"):
        ring_attention(q, k[..., :7], v, mesh=mesh, axis="seq")


def test_zigzag_shard_errors() -> None:
    with pytest.raises(
        ShapeError, match=r"length 10 on axis -2 does not divide by 2 x parts = 4.*\(12\)"
    ):
        zigzag_shard(jnp.ones((10, 3)), 2)
    with pytest.raises(ParameterError, match="positive int"):
        zigzag_shard(jnp.ones((8, 3)), 0)


@pytest.fixture(scope="module")
def mesh2() -> Any:
    devices = np.array(jax.devices()[:P]).reshape(2, 2)
    return jax.sharding.Mesh(devices, ("data", "seq"), axis_types=(AxisType.Auto,) * 2)


@pytest.mark.parametrize(
    ("lead", "match"),
    [
        ("data", r"lead_axes='data'.*tuple of mesh axis names"),
        (("batch",), r"'batch' is not an axis of the mesh.*\('data', 'seq'\)"),
        (("seq",), r"sequence axis 'seq'.*distinct axes"),
        (("data", "data"), r"each mesh axis may shard one dim only"),
    ],
)
def test_bad_lead_axes(mesh2: Any, lead: Any, match: str) -> None:
    q, k, v = _qkv(L=64, H=4)
    for fn in (ring_attention, ulysses_attention):
        with pytest.raises(ParameterError, match=match):
            fn(q, k, v, mesh=mesh2, axis="seq", lead_axes=lead)


def test_lead_axes_shapes_refused(mesh2: Any) -> None:
    q, k, v = _qkv(L=64, H=4)  # batch 1: not divisible by the 2 devices of "data"
    with pytest.raises(ShapeError, match=r"dim 0 has sizes .*divisible by the 2 devices"):
        ring_attention(q, k, v, mesh=mesh2, axis="seq", lead_axes=("data",))
    q3 = q[0]  # (H, L, E) against (1, H, S, E): broadcasting across a sharded dim
    with pytest.raises(ShapeError, match="of one rank"):
        ring_attention(q3, k, v, mesh=mesh2, axis="seq", lead_axes=("data",))
    qh = jnp.concatenate([q, q[:, :1]], axis=1)  # 5 heads vs 4 without GQA
    with pytest.raises(ShapeError, match=r"dim 1 has sizes"):
        ring_attention(qh, k, v, mesh=mesh2, axis="seq", lead_axes=(None, "data"))


def test_lead_axes_score_mod_and_mask_refused(mesh2: Any) -> None:
    q, k, v = (jnp.concatenate([x, x], axis=0) for x in _qkv(L=64, H=4))  # (2, 4, 64, 8)
    with pytest.raises(ParameterError, match="local head indices"):
        ring_attention(q, k, v, mesh=mesh2, axis="seq", lead_axes=(None, "data"),
                       score_mod=ak.score_mods.alibi(4))  # fmt: skip
    with pytest.raises(ParameterError, match=r"leading dims \(2, 1\).*varies along dim 0"):
        ring_attention(q, k, v, mesh=mesh2, axis="seq", lead_axes=("data",),
                       attn_mask=ak.masks.key_padding([50, 64]))  # fmt: skip


def test_ulysses_local_heads_not_divisible(mesh2: Any) -> None:
    q, k, v = _qkv(L=64, H=2)  # 2 heads over "data" leaves 1 per device for 2 "seq" devices
    q, k, v = (jnp.concatenate([x, x], axis=0) for x in (q, k, v))
    with pytest.raises(ShapeError, match=r"2 heads \(1 per device of 'data'\)"):
        ulysses_attention(q, k, v, mesh=mesh2, axis="seq", lead_axes=(None, "data"))


def test_array_masks_beyond_segments_refused(mesh: Any) -> None:
    q, k, v = _qkv(L=64, H=4)
    ids = jnp.zeros((1, 64), dtype=jnp.int32)
    seg = ak.masks.segments(ids)
    lens = ak.masks.key_padding(jnp.asarray([50]))
    for m in (seg | ak.masks.causal(), seg & lens, lens):
        with pytest.raises(ParameterError, match=r"carried by arrays.*masks\.segments"):
            ring_attention(q, k, v, mesh=mesh, axis="seq", attn_mask=m)
    with pytest.raises(ParameterError, match="ring_attention for segment ids"):
        ulysses_attention(q, k, v, mesh=mesh, axis="seq", attn_mask=seg)
    with pytest.raises(ArgumentTypeError, match="segments q_ids of type ndarray"):
        ring_attention(
            q, k, v, mesh=mesh, axis="seq", attn_mask=ak.masks.segments(np.zeros((1, 64), int))
        )
    with pytest.raises(ShapeError, match="ids"):  # the core's own check, whole call
        ring_attention(q, k, v, mesh=mesh, axis="seq", attn_mask=ak.masks.segments(ids[:, :32]))


def _no_work(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any trace of the ring's or Ulysses' per-device program fails the test."""
    from attnkit.backends.jax import sharding

    def boom(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the sharded program was traced before the error")

    for name in ("ring_forward", "ring_backward", "ulysses_body"):
        monkeypatch.setattr(sharding, name, boom)


@BOTH
@pytest.mark.parametrize(
    "shape, kw, error, words",
    [
        ((16,), {}, ShapeError, ["query of shape (16,)", "rank"]),
        ((1, 4, 64, 8), {"block_size": 0}, ParameterError, ["block_size=0", "positive int"]),
        ((1, 4, 64, 8), {"block_size": 2.5}, ParameterError, ["block_size=2.5"]),
    ],
)
def test_bad_rank_and_block_size_refused_before_any_work(
    fn: Any, mesh: Any, shape: tuple, kw: dict, error: type, words: list[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    """Issue 26 (6): a rank-1 query gave IndexError; block_size=0 came after compiling."""
    _no_work(monkeypatch)
    q = jnp.ones(shape, jnp.float32)
    with pytest.raises(error) as info:
        fn(q, q, q, mesh=mesh, axis="seq", **kw)
    for word in words:
        assert word in str(info.value), str(info.value)
