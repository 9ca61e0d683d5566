"""Differential fuzzing of sequence-parallel attention on 4 JAX host devices
(issue 26, item 8): ``attnkit.backends.jax.sharding.ring_attention`` (and
``ulysses_attention``) against the one-device core.

Each draw is one legal call: layout (zigzag, contiguous), an Explicit or Auto mesh, the
call form (inputs sharded ``PartitionSpec(None, None, "seq", None)`` by
``jax.device_put`` or replicated; jitted or eager; inside ``jax.set_mesh`` or not),
causal with either alignment, windows, GQA, a scale, query/key offsets, a positional mask
structure or segment ids (alone or & a structure), a score_mod (softcap, alibi), float64
or float32. The oracle is ``attnkit.attention_vjp`` (the core's array-API forward and
backward) on the unsharded NumPy arrays in natural order with the same core kwargs, in
float64: the output and the gradients of a random linear functional ``sum(out * ct)``
w.r.t. q, k and v must match it to 1e-12 (float64 inputs) or 2e-5 (float32). A call the
core refuses must be refused by the sharded call with the same attnkit error class;
bottom-right alignment with L != S, which the sharded calls refuse (its shift is the whole
call's), must raise ``ParameterError``. Eager calls check gradients too.

Shapes are drawn from a few values (every new shape is new XLA compiles) and the example
count is small: the module runs in about a minute on two CPU cores. The bugs issue 26
found are its ``@example`` cases.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import hypothesis.strategies as st
import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, note, settings

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
from attnkit.errors import AttnkitError, ParameterError, ShapeError  # noqa: E402

P = 4
TOL = {"float64": 1e-12, "float32": 2e-5}
SEQ = PartitionSpec(None, None, "seq", None)  # (B, H, L, E) sharded along the sequence
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


@st.composite
def calls(draw: Any) -> dict[str, Any]:
    """One legal sharded call, as plain data (shapes, flags, a seed)."""
    fn = draw(st.sampled_from(["ring", "ring", "ring", "ulysses"]))
    # Ulysses splits heads over the P devices: Hq, Hkv divisible by 4
    heads = (4, 4) if fn == "ulysses" else draw(st.sampled_from([(2, 2), (4, 2), (2, 1)]))
    # divisible by 2P = 8; 8 twice as often as 16 (16 in zigzag compiles slowest)
    L, S = (draw(st.sampled_from([8, 8, 16])) for _ in "LS")
    causal = draw(st.booleans())
    window = draw(st.one_of(st.none(), st.integers(0, 6),
                            st.tuples(st.integers(0, 6), st.integers(0, 6))))  # fmt: skip
    masks = [None, "sliding_window", "documents"]
    if fn == "ring":  # Ulysses refuses segment ids (arrays) and score_mods (head index)
        masks += ["segments", "segments&documents"]
    return {
        "fn": fn, "heads": heads, "L": L, "S": S,
        "layout": draw(st.sampled_from(["zigzag", "contiguous"])),
        "mesh": draw(st.sampled_from(["explicit", "auto"])),
        "placement": draw(st.sampled_from(["sharded", "replicated"])),
        "mode": draw(st.sampled_from(["jit", "jit", "eager"])),
        "in_mesh": draw(st.booleans()),
        "dtype": draw(st.sampled_from(["float64", "float32"])),
        "is_causal": causal,
        "alignment": draw(st.sampled_from(["top_left", "bottom_right"])) if causal else None,
        "window": window,
        "mask": draw(st.sampled_from(masks)),
        "score_mod": None if fn == "ulysses" else draw(st.sampled_from([None, "softcap",
                                                                       "alibi"])),
        "scale": draw(st.one_of(st.none(), st.floats(0.1, 1.0))),
        "q_offset": draw(st.sampled_from([0, 0, 3])),
        "kv_offset": draw(st.sampled_from([0, 0, 5])),
        "seed": draw(st.integers(0, 2**16)),
    }  # fmt: skip


def _ids(rng: np.random.Generator, n: int) -> np.ndarray:
    """(1, n) packed-document ids: sorted, 1 to 3 documents."""
    return np.sort(rng.integers(0, 3, size=(1, n))).astype(np.int32)


def _kwargs(c: dict[str, Any], rng: np.random.Generator) -> tuple[dict, dict]:
    """(the oracle's core kwargs on NumPy, the sharded call's kwargs): they differ only
    in segment ids, NumPy in natural order for the oracle, JAX arrays in the arrays'
    order for the sharded call."""
    kw: dict[str, Any] = {}
    if c["heads"][0] != c["heads"][1]:
        kw["enable_gqa"] = True
    if c["is_causal"]:
        kw["is_causal"] = True
        kw["causal_alignment"] = c["alignment"]
    if c["window"] is not None:
        kw["window"] = c["window"]
    if c["scale"] is not None:
        kw["scale"] = c["scale"]
    for name in ("q_offset", "kv_offset"):
        if c[name]:
            kw[name] = c[name]
    if c["score_mod"] == "softcap":
        kw["score_mod"] = ak.score_mods.softcap(2.0)
    elif c["score_mod"] == "alibi":
        kw["score_mod"] = ak.score_mods.alibi(c["heads"][0])
    n = max(c["q_offset"] + c["L"], c["kv_offset"] + c["S"])  # documents cover both
    structure = {
        "sliding_window": ak.masks.sliding_window((3, 2)),
        "documents": ak.masks.documents([n // 4, n // 2, n - n // 4 - n // 2]),
    }
    mine, theirs = dict(kw), dict(kw)
    mask = c["mask"] or ""
    if "segments" in mask:
        q_ids, kv_ids = _ids(rng, c["L"]), _ids(rng, c["S"])
        order = _order(c["layout"])
        theirs["attn_mask"] = ak.masks.segments(q_ids, kv_ids)
        mine["attn_mask"] = ak.masks.segments(jnp.asarray(order(q_ids, -1)),
                                              jnp.asarray(order(kv_ids, -1)))  # fmt: skip
        if "&" in mask:
            theirs["attn_mask"] &= structure["documents"]
            mine["attn_mask"] &= structure["documents"]
    elif mask:
        mine["attn_mask"] = theirs["attn_mask"] = structure[mask]
    return theirs, mine


def _order(layout: str) -> Any:
    """Natural order -> the arrays' order (zigzag_shard on NumPy), by layout."""
    if layout == "zigzag":
        return lambda x, axis=-2: np.asarray(zigzag_shard(x, P, axis))
    return lambda x, axis=-2: x


def _host(x: Any) -> np.ndarray:
    return np.asarray(jax.device_put(x, jax.devices()[0]))


def _arrays(c: dict[str, Any], rng: np.random.Generator) -> tuple[np.ndarray, ...]:
    """(q, k, v, ct) in natural order, float64, ct the linear functional's weights."""
    (hq, hkv), E = c["heads"], 4
    shapes = ((1, hq, c["L"], E), (1, hkv, c["S"], E), (1, hkv, c["S"], E), (1, hq, c["L"], E))
    arrays = tuple(rng.standard_normal(s) for s in shapes)
    if c["dtype"] == "float32":  # the oracle sees the same rounded inputs, in float64
        arrays = tuple(x.astype(np.float32).astype(np.float64) for x in arrays)
    return arrays


def _mesh(kind: str) -> Any:
    axis_type = AxisType.Explicit if kind == "explicit" else AxisType.Auto
    return jax.make_mesh((P,), ("seq",), axis_types=(axis_type,))


def _sharded(
    c: dict[str, Any], kw: dict[str, Any], arrays: tuple[np.ndarray, ...]
) -> tuple[np.ndarray, ...]:
    """(out, dq, dk, dv) of the sharded call in natural order."""
    fn = ring_attention if c["fn"] == "ring" else ulysses_attention
    mesh, order = _mesh(c["mesh"]), _order(c["layout"])
    dtype = jnp.dtype(c["dtype"])
    spec = SEQ if c["placement"] == "sharded" else PartitionSpec()
    q, k, v = (jax.device_put(jnp.asarray(order(x), dtype), NamedSharding(mesh, spec))
               for x in arrays[:3])  # fmt: skip
    ct = jax.device_put(jnp.asarray(order(arrays[3]), dtype), NamedSharding(mesh, SEQ))

    def attend(q: Any, k: Any, v: Any) -> Any:
        return fn(q, k, v, mesh=mesh, axis="seq", layout=c["layout"], **kw)

    def loss(q: Any, k: Any, v: Any) -> tuple[Any, Any]:
        out = attend(q, k, v)
        return jnp.sum(out * ct), out

    def both(q: Any, k: Any, v: Any) -> tuple[Any, ...]:
        (_, out), grads = jax.value_and_grad(loss, (0, 1, 2), has_aux=True)(q, k, v)
        return (out, *grads)

    call = jax.jit(both) if c["mode"] == "jit" else both
    if c["in_mesh"]:
        with jax.set_mesh(mesh):
            got = call(q, k, v)
    else:
        got = call(q, k, v)
    unorder = (lambda x: zigzag_unshard(x, P)) if c["layout"] == "zigzag" else (lambda x: x)
    return tuple(np.asarray(unorder(_host(x)), np.float64) for x in got)


BASE = {"fn": "ring", "heads": (2, 2), "L": 8, "S": 8, "layout": "zigzag",
        "mesh": "explicit", "placement": "sharded", "mode": "jit", "in_mesh": False,
        "dtype": "float64", "is_causal": False, "alignment": None, "window": None,
        "mask": None, "score_mod": None, "scale": None, "q_offset": 0, "kv_offset": 0,
        "seed": 1}  # fmt: skip


@settings(max_examples=5, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow])  # fmt: skip
@given(calls())
# issue 26: on an Explicit mesh (jax.make_mesh's default) with inputs sharded as the
# docstring asks, jitted, with or without jax.set_mesh: ShardingTypeError
@example({**BASE, "is_causal": True, "alignment": "top_left"})
@example({**BASE, "is_causal": True, "alignment": "top_left", "in_mesh": True})
# issue 26: a score_mod with no causal, window or mask raised AttributeError
@example({**BASE, "mesh": "auto", "score_mod": "softcap", "heads": (4, 2), "layout": "contiguous"})
# an eager form: replicated inputs on an Explicit mesh inside set_mesh (an eager ring
# ran its shard_map op by op, about 10 s a call; it is compiled now)
@example({**BASE, "mode": "eager", "placement": "replicated", "in_mesh": True, "is_causal": True,
          "alignment": "top_left"})  # fmt: skip
def test_fuzz_sharded_attention_matches_core(c: dict[str, Any]) -> None:
    note(repr(c))
    rng = np.random.default_rng(c["seed"])
    arrays = _arrays(c, rng)
    theirs, mine = _kwargs(c, rng)
    try:
        out, vjp = ak.attention_vjp(*arrays[:3], **theirs)
    except AttnkitError as refused:  # the core refuses: so must the sharded call
        note(f"the core refused: {refused!r}")
        with pytest.raises(type(refused)):
            _sharded(c, mine, arrays)
        return
    if c["alignment"] == "bottom_right" and c["L"] != c["S"]:  # documented refusal
        with pytest.raises(ParameterError, match="bottom_right"):
            _sharded(c, mine, arrays)
        return
    want = (out, *vjp(arrays[3]))
    got = _sharded(c, mine, arrays)
    tol = TOL[c["dtype"]]
    for name, g, w in zip(("out", "dq", "dk", "dv"), got, want, strict=False):
        assert g.shape == w.shape, f"{name}: shape {g.shape}, the core's {w.shape}"
        assert not np.isnan(g).any(), f"NaN in the sharded {name}"
        err = float(np.max(np.abs(g - w)))
        assert err <= tol, f"{c['fn']} {name} differs from the core by {err:.3e} > {tol:.1e}"


@settings(max_examples=4, deadline=None, derandomize=True, database=None)
@given(
    fn=st.sampled_from([ring_attention, ulysses_attention]),
    bad=st.sampled_from(["rank-1 query", "block_size=0"]),
    kind=st.sampled_from(["explicit", "auto"]),
)
def test_fuzz_bad_input_refused_before_any_work(fn: Any, bad: str, kind: str) -> None:
    """A rank-1 query (ShapeError) or block_size=0 (ParameterError) is refused with
    attnkit's error class before the per-device program is traced."""
    from attnkit.backends.jax import sharding

    mesh = _mesh(kind)
    q = jnp.ones((1, 4, 16, 4), jnp.float32)
    args, kw, error = (q, q, q), {}, ParameterError
    if bad == "rank-1 query":
        args, error = (q[0, 0, :, 0], q, q), ShapeError
    else:
        kw["block_size"] = 0

    def boom(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the sharded program was traced before the error")

    saved = {name: getattr(sharding, name) for name in ("ring_forward", "ring_backward",
                                                         "ulysses_body")}  # fmt: skip
    try:
        for name in saved:
            setattr(sharding, name, boom)
        with pytest.raises(error) as info:
            fn(*args, mesh=mesh, axis="seq", **kw)
    finally:
        for name, f in saved.items():
            setattr(sharding, name, f)
    assert isinstance(info.value, AttnkitError)
    assert ("block_size=0" if bad == "block_size=0" else "query") in str(info.value)
