"""Every documented call form of ring and Ulysses attention on Explicit meshes
(``jax.make_mesh``'s default) and Auto meshes (issue 26, item 4): inputs sharded
``PartitionSpec(None, None, "seq", None)`` with ``jax.device_put``, replicated, or on one
device; eager or under ``jax.jit``; inside ``jax.set_mesh(mesh)`` or not. Outputs and
gradients equal the one-device core (float32, 2e-5)."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402
from attnkit.backends.jax.sharding import ring_attention, ulysses_attention  # noqa: E402
from jax.sharding import AxisType, NamedSharding, PartitionSpec  # noqa: E402

import attnkit as ak  # noqa: E402

P = 4
TOL = 2e-5
pytestmark = pytest.mark.skipif(
    jax.device_count() < P,
    reason="needs 4 JAX devices: XLA_FLAGS=--xla_force_host_platform_device_count=4 "
    "(the nox session distributed-jax sets it)",
)

FORMS = [
    *itertools.product(
        ["explicit", "auto"],  # mesh axis type
        ["sharded", "replicated"],  # how the inputs are placed
        ["eager", "jit"],
        [False, True],  # inside jax.set_mesh(mesh)
    ),
    # arrays on one device are placed on the mesh by the call itself; under jax.jit or
    # jax.grad JAX refuses to mix them with the mesh's devices before attnkit sees them
    # ("incompatible devices"): jax.device_put them first
    *itertools.product(["explicit", "auto"], ["one-device"], ["eager"], [False, True]),
]


def _mesh(kind: str, shape: tuple[int, ...] = (P,), names: tuple[str, ...] = ("seq",)) -> Any:
    axis_type = AxisType.Explicit if kind == "explicit" else AxisType.Auto
    return jax.make_mesh(shape, names, axis_types=(axis_type,) * len(shape))


def _place(x: Any, mesh: Any, placement: str, spec: PartitionSpec) -> Any:
    if placement == "one-device":
        return jax.device_put(x, jax.devices()[0])
    return jax.device_put(
        x, NamedSharding(mesh, spec if placement == "sharded" else PartitionSpec())
    )


def _host(x: Any) -> np.ndarray:
    return np.asarray(jax.device_put(x, jax.devices()[0]))


def _run(f: Any, mesh: Any, mode: str, in_mesh: bool, *args: Any) -> tuple[np.ndarray, ...]:
    """(out, dq, dk, dv) of sum(f(q, k, v) * ct) as one jitted program, or eagerly the
    output alone (op-by-op gradients on 4 host devices cost minutes; jit covers them)."""

    def both(q: Any, k: Any, v: Any, ct: Any) -> tuple[Any, ...]:
        out, pullback = jax.vjp(f, q, k, v)
        return (out, *pullback(ct))

    call = jax.jit(both) if mode == "jit" else (lambda q, k, v, ct: (f(q, k, v),))
    if in_mesh:
        with jax.set_mesh(mesh):
            got = call(*args)
    else:
        got = call(*args)
    return tuple(_host(x) for x in got)


def _want(q: Any, k: Any, v: Any, ct: Any, kw: dict) -> tuple[np.ndarray, ...]:
    def core(q: Any, k: Any, v: Any) -> Any:
        return ak.scaled_dot_product_attention(q, k, v, **kw)

    out, pullback = jax.vjp(core, *(jnp.asarray(_host(x)) for x in (q, k, v)))
    return tuple(np.asarray(x) for x in (out, *pullback(jnp.asarray(_host(ct)))))


def _compare(got: tuple, want: tuple, what: str) -> None:
    for name, g, w in zip(("out", "dq", "dk", "dv"), got, want, strict=False):
        err = float(np.max(np.abs(g - w)))
        assert err <= TOL, f"{what}: {name} differs by {err:.2e} > {TOL}"


def _inputs(seed: int, heads: int = 4, L: int = 32) -> tuple[Any, ...]:
    rng = np.random.default_rng(seed)
    return tuple(jnp.asarray(rng.standard_normal((1, heads, L, 8)), jnp.float32) for _ in range(4))


@pytest.mark.parametrize("fn", [ring_attention, ulysses_attention], ids=["ring", "ulysses"])
@pytest.mark.parametrize("form", FORMS, ids=["-".join(map(str, f)) for f in FORMS])
def test_every_call_form_on_explicit_and_auto_meshes(fn: Any, form: tuple) -> None:
    kind, placement, mode, in_mesh = form
    mesh = _mesh(kind)
    kw = {"is_causal": True}
    q, k, v, ct = _inputs(1)
    want = _want(q, k, v, ct, kw)
    spec = PartitionSpec(None, None, "seq", None)
    q, k, v = (_place(x, mesh, placement, spec) for x in (q, k, v))
    ct = _place(ct, mesh, "sharded", spec)  # the output's sharding: JAX's rule for a VJP

    def attend(q: Any, k: Any, v: Any) -> Any:
        return fn(q, k, v, mesh=mesh, axis="seq", layout="contiguous", **kw)

    _compare(_run(attend, mesh, mode, in_mesh, q, k, v, ct), want, f"{fn.__name__} {form}")


@pytest.mark.parametrize("kind", ["explicit", "auto"])
def test_segment_ids_sharded_by_device_put(kind: str) -> None:
    """Segment ids sharded like the sequence (jax.device_put), the inputs too, jitted
    inside set_mesh (the whole-call check met JAX's sharding types of the ids)."""
    ids = jnp.asarray(np.repeat(np.arange(4), 8)[None], jnp.int32)  # (1, L): 4 documents
    q, k, v, ct = _inputs(3)
    want = _want(q, k, v, ct, {"attn_mask": ak.masks.segments(ids), "is_causal": True})
    mesh = _mesh(kind)
    spec = PartitionSpec(None, None, "seq", None)
    placed = [_place(x, mesh, "sharded", spec) for x in (q, k, v, ct)]
    mask = ak.masks.segments(jax.device_put(ids, NamedSharding(mesh, PartitionSpec(None, "seq"))))

    def attend(q: Any, k: Any, v: Any) -> Any:
        return ring_attention(q, k, v, mesh=mesh, axis="seq", layout="contiguous",
                              attn_mask=mask, is_causal=True)  # fmt: skip

    _compare(_run(attend, mesh, "jit", True, *placed), want, f"segments on {kind}")


@pytest.mark.parametrize("kind", ["explicit", "auto"])
def test_batch_parallel_beside_the_ring_on_sharded_inputs(kind: str) -> None:
    """lead_axes over a 2-D (data, seq) mesh, inputs placed by jax.device_put as the
    docstring asks (PartitionSpec("data", None, "seq", None)), jitted."""
    mesh = _mesh(kind, (2, 2), ("data", "seq"))
    rng = np.random.default_rng(4)
    q, k, v, ct = (jnp.asarray(rng.standard_normal((2, 2, 32, 8)), jnp.float32) for _ in range(4))
    want = _want(q, k, v, ct, {"window": 5})
    spec = PartitionSpec("data", None, "seq", None)
    placed = [_place(x, mesh, "sharded", spec) for x in (q, k, v, ct)]

    def attend(q: Any, k: Any, v: Any) -> Any:
        return ring_attention(q, k, v, mesh=mesh, axis="seq", lead_axes=("data",),
                              layout="contiguous", window=5)  # fmt: skip

    _compare(_run(attend, mesh, "jit", False, *placed), want, f"lead_axes on {kind}")
