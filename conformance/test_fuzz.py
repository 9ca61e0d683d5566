"""Differential fuzzing of ``scaled_dot_product_attention`` against the float64 oracle.

Hypothesis draws whole calls (``fuzz_strategies.cases``: shapes, GQA, masks of every
kind and broadcast form, causal, windows, offsets, scales, score mods, dtypes, block
sizes) and each is run under every impl on the backend chosen with ``--backend``:

``test_fuzz_attention``  out, weights and lse against the oracle (``fuzz_oracle``) under
                         the tolerance table; impls against each other; output type,
                         dtype and shape; empty rows exactly 0 with lse -inf; weights in
                         [0, 1] summing to 1; inputs unchanged.
``test_fuzz_poison``     NaN / inf / 1e10 written into a key row changes only the rows
                         allowed to attend it, and a row that attends a NaN score has NaN
                         output and lse on every impl; NaN / inf in value rows no query
                         may attend, and NaN in the query rows of empty rows, change
                         nothing (empty rows stay exactly 0, lse -inf).
``test_fuzz_gradients``  (backends with autodiff) gradients against the oracle's analytic
                         ones in float64, finite where poison sits only in dead keys,
                         dead values and empty rows.

Profiles: ``ci`` (default; derandomized, bounded) and ``long`` (many random examples):
``ATTNKIT_FUZZ_PROFILE=long pytest conformance/test_fuzz.py --backend=torch``.
``ATTNKIT_FUZZ_EXAMPLES=N`` sets the examples per test (before the backend's factor).
"""

from __future__ import annotations

import math
import os
import zlib
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import fuzz_oracle as fo
import hypothesis.strategies as st
import numpy as np
import pytest
from fuzz_strategies import FULL, SMALL, cases
from harness import Backend
from hypothesis import HealthCheck, example, given, note, settings

import attnkit as ak
from attnkit import masks as ak_masks
from attnkit.testing import AttentionMismatch, assert_attention_close
from attnkit.testing.tolerances import RHO_OUT, assert_close, exact_allowed, lowp_allowed

_COMMON = dict(
    deadline=None,
    database=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile("ci", max_examples=2000, derandomize=True, **_COMMON)
settings.register_profile("long", max_examples=5000, derandomize=False, **_COMMON)
PROFILE = os.environ.get("ATTNKIT_FUZZ_PROFILE", "ci")

#: Examples of each test, as a share of the profile's max_examples, so that the ci profile
#: adds about a minute to each conformance session on a 2-core machine (NumPy's runs twice,
#: JAX's eagerly and under jit). Per example and test: NumPy and PyTorch about 10 ms,
#: array-api-strict 17 ms, JAX 0.65 s eagerly (every operation dispatched alone) and 0.4 s
#: under jit (one compilation per new combination of static arguments).
_SHARE = {"attention": 1.0, "poison": 0.8, "gradients": 0.4}
_BACKEND_SHARE = {"numpy": 0.85, "strict": 0.95, "torch": 1.3, "jax": 0.012, "jax-jit": 0.015}

IMPLS = ("auto", "generic", "reference")

#: Found from outside: a query block whose last row has no key in reach (a window ending
#: past the keys) took its keys from its first row only, under JAX's pair loop: rows 5
#: and 6 of the block of rows 4..7 lost keys 4 and 5.
EDGE_OF_REACH = fo.FuzzCase(
    q=(1, 2, 13, 3), k=(1, 2, 6, 3), v=(1, 2, 6, 2), dtype="float64", seed=7, window=(0, 0),
    kv_offset=1, block_size=4, auto_block_size=4,
)  # fmt: skip
# Poison makes NumPy warn (invalid value in matmul, overflow in a cast): expected here.
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")
LOW = ("float16", "bfloat16")


def _settings(backend: Backend, test: str) -> settings:
    base = settings.get_profile(PROFILE)
    n = int(os.environ.get("ATTNKIT_FUZZ_EXAMPLES", base.max_examples))
    name = backend.name + ("-jit" if backend.jit else "")
    return settings(base, max_examples=max(3, round(n * _SHARE[test] * _BACKEND_SHARE[name])))


def _sizes(backend: Backend):
    return SMALL if backend.name == "jax" else FULL


# --- running a case on the backend ---------------------------------------------------------

_JITTED: dict[Any, Any] = {}
_BUILT: dict[Any, Any] = {}


def _call(backend: Backend, *arrays: Any, **kwargs: Any) -> Any:
    """backend.call, except that under --jit one compiled function serves every call with
    the same static arguments (the harness compiles afresh each time)."""
    fn = ak.scaled_dot_product_attention
    if not backend.jit:
        return backend.call(fn, *arrays, **kwargs)
    traced = {
        k: v
        for k, v in kwargs.items()
        if k == "attn_mask" and v is not None and not isinstance(v, ak_masks.Mask)
    }
    static = {k: v for k, v in kwargs.items() if k not in traced}
    key = (tuple(sorted(static.items(), key=lambda kv: kv[0])), tuple(traced))
    try:
        hash(key)
    except TypeError:  # an unhashable static argument: compile this call alone
        return backend.jax.jit(lambda *a, **t: fn(*a, **t, **static))(*arrays, **traced)
    if len(_JITTED) > 512:
        _JITTED.clear()
    if key not in _JITTED:
        _JITTED[key] = backend.jax.jit(lambda *a, **t: fn(*a, **t, **static))
    return _JITTED[key](*arrays, **traced)


def _int_array(backend: Backend, a: np.ndarray) -> Any:
    a = np.asarray(a, np.int64)
    if backend.name == "torch":
        return backend.torch.from_numpy(a)
    if backend.name == "jax":
        return backend.jnp.asarray(a, dtype=backend.jnp.int32)
    if backend.name == "strict":
        return backend.xp.asarray(a, device=backend.device)
    return a


def _structure(backend: Backend, node: fo.Node) -> ak_masks.Mask:
    """The attnkit mask of ``node`` on the backend, one object per node (jit reuse)."""
    if len(_BUILT) > 512:
        _BUILT.clear()
    if node not in _BUILT:
        _BUILT[node] = node.build(
            lambda a: backend.asarray(a, "bool"), lambda a: _int_array(backend, a)
        )
    return _BUILT[node]


def _arrays(backend: Backend, p: fo.Problem, q=None, k=None, v=None) -> tuple[Any, ...]:
    """query, key, value (in the case's layout) and attn_mask on the backend."""
    c = p.case
    put = backend.transposed_view if c.layout == "transposed" else backend.asarray
    q = put(p.q if q is None else q, c.dtype)
    k = put(p.k if k is None else k, c.dtype)
    v = put(p.v if v is None else v, c.dtype)
    if isinstance(c.mask, fo.ArrayMask):
        mask = backend.asarray(p.mask, "bool" if c.mask.kind == "bool" else c.dtype)
        if c.mask.expand:
            mask = backend.broadcast_to(mask, (*c.out_lead, c.L, c.S))
    elif isinstance(c.mask, fo.Node):
        try:
            mask = _structure(backend, c.mask)
        except Exception as e:
            raise AssertionError(
                f"building the mask raised {type(e).__name__}: {e} ({c.describe()})"
            ) from e
    else:
        mask = None
    return q, k, v, mask


def _variants(case: fo.FuzzCase) -> list[tuple[str, bool, bool]]:
    """(impl, return_weights, return_lse): each impl as drawn, and auto without returns
    too (PyTorch's fused kernel only runs then)."""
    out = [(impl, case.return_weights, case.return_lse) for impl in IMPLS]
    if case.return_weights or case.return_lse:
        out.append(("auto", False, False))
    return out


def _kwargs(case: fo.FuzzCase, impl: str, rw: bool, rl: bool) -> dict[str, Any]:
    kw = case.kwargs()
    if case.window_mask and case.window is not None:
        kw["window"] = ak_masks.sliding_window(case.window, case.causal_alignment)
    mod = fo.score_mod_pair(case.score_mod)[0]
    if mod is not None:
        kw["score_mod"] = mod
    if impl == "generic":
        kw.update(impl="generic", block_size=case.block_size)
    elif impl == "reference":
        kw["impl"] = "reference"
    elif case.auto_block_size is not None:
        kw["block_size"] = case.auto_block_size
    if rw:
        kw["return_weights"] = True
    if rl:
        kw["return_lse"] = True
    return kw


def _context(backend: Backend, case: fo.FuzzCase, impl: str, rw: bool, rl: bool) -> str:
    return (
        f"backend {backend.name}{' jit' if backend.jit else ''}"
        f"{' readonly' if backend.readonly else ''}, impl {impl}, return_weights={rw}, "
        f"return_lse={rl}; {case.describe()}"
    )


def _run(backend: Backend, arrays, case, impl, rw, rl, ctx) -> tuple[Any, Any, Any]:
    """(out, weights or None, lse or None) as backend arrays; an exception is a failure."""
    q, k, v, mask = arrays
    try:
        res = _call(backend, q, k, v, attn_mask=mask, **_kwargs(case, impl, rw, rl))
    except Exception as e:
        raise AssertionError(f"the call raised {type(e).__name__}: {e} ({ctx})") from e
    if not (rw or rl):
        return res, None, None
    return res[0], res[1] if rw else None, res[-1] if rl else None


def _np(backend: Backend, x: Any) -> np.ndarray | None:
    return None if x is None else backend.to_numpy(x)


# --- tolerances ----------------------------------------------------------------------------


def _finite(a: np.ndarray) -> np.ndarray:
    return a[np.isfinite(a)]


def _allowed(p: fo.Problem, gold: np.ndarray, lowp: np.ndarray | None, rho=RHO_OUT) -> float:
    """The table's allowed error (magnitudes over the finite reference values)."""
    if p.case.dtype in LOW:
        with np.errstate(invalid="ignore"):
            diff = np.where(lowp == gold, 0.0, np.abs(lowp - gold))
        return lowp_allowed(p.case.dtype, float(np.max(diff, initial=0.0)), _finite(gold), rho)
    return exact_allowed(p.case.dtype, p.score_max, _finite(gold))


def _tols(p: fo.Problem) -> dict[str, float]:
    g, lp = p.gold, p.lowp
    return {
        name: _allowed(p, getattr(g, name), None if lp is None else getattr(lp, name))
        for name in ("out", "weights", "lse")
    }


# --- the checks ----------------------------------------------------------------------------


def _check_result(backend, p, arrays, res, rw, rl, ctx) -> None:
    """Type, dtype, shape and values of one result against the oracle."""
    c, gold, tol = p.case, p.gold, _tols(p)
    out, weights, lse = res
    q = arrays[0]
    lead = c.out_lead
    for name, x, last in (("out", out, c.v[-1]), ("weights", weights, c.S)):
        if x is None:
            continue
        assert type(x) is type(q), (
            f"{name} is a {type(x).__name__}, query a {type(q).__name__} ({ctx})"
        )
        assert str(x.dtype).endswith(c.dtype), f"{name} dtype {x.dtype}, expected {c.dtype} ({ctx})"
        assert tuple(x.shape) == (*lead, c.L, last), f"{name} shape {tuple(x.shape)} ({ctx})"
    empty = np.isneginf(gold.lse)  # (*lead, L): rows with nothing to attend
    o = backend.to_numpy(out)
    assert_close("out", o, gold.out, tol["out"], ctx)
    assert not np.isnan(o).any(), f"out has NaN ({ctx})"
    bad = o[empty]
    assert np.all(bad == 0.0), (
        f"out on rows with nothing to attend must be exactly 0, max |out| there "
        f"{float(np.max(np.abs(bad), initial=0.0)):.3e} ({ctx})"
    )
    if weights is not None:
        w = backend.to_numpy(weights)
        assert_close("weights", w, gold.weights, tol["weights"], ctx)
        masked = w[~np.broadcast_to(gold.allowed, w.shape)]
        assert np.all(masked == 0.0), (
            f"weights at masked positions must be exactly 0, max "
            f"{float(np.max(np.abs(masked), initial=0.0)):.3e} ({ctx})"
        )
        assert np.all((w >= 0) & (w <= 1 + 1e-6)), f"weights outside [0, 1] ({ctx})"
        sums = w.sum(axis=-1)[~empty]
        atol = 1e-2 if c.dtype in LOW else 1e-5
        err = float(np.max(np.abs(sums - 1.0), initial=0.0))
        assert err <= atol, f"non-empty rows sum to 1 +- {err:.3e} > allowed {atol} ({ctx})"
    if lse is not None:
        want = "float32" if c.dtype in LOW else c.dtype
        assert type(lse) is type(q), f"lse is a {type(lse).__name__} ({ctx})"
        assert str(lse.dtype).endswith(want), f"lse dtype {lse.dtype}, expected {want} ({ctx})"
        assert tuple(lse.shape) == (*lead, c.L), f"lse shape {tuple(lse.shape)} ({ctx})"
        got = backend.to_numpy(lse)
        assert np.array_equal(np.isneginf(got), empty), (
            f"lse must be -inf exactly on the {int(empty.sum())} rows with nothing to attend, "
            f"got -inf on {int(np.isneginf(got).sum())}, first mismatch at "
            f"{tuple(int(i) for i in np.argwhere(np.isneginf(got) != empty)[0])} ({ctx})"
        )
        assert_close("lse", got, gold.lse, tol["lse"], ctx)


def _unchanged(backend: Backend, arrays, originals, ctx: str) -> None:
    for name, x, original in zip(
        ("query", "key", "value", "attn_mask"), arrays, originals, strict=True
    ):
        if x is None or original is None or isinstance(x, ak_masks.Mask):
            continue
        got = backend.to_numpy(x)
        want = np.broadcast_to(np.asarray(original, np.float64), got.shape)
        assert np.array_equal(got, want, equal_nan=True), f"{name} modified in place ({ctx})"


def _compare(what: str, got: dict, base: dict, rows: np.ndarray | None, tol, ctx: str) -> None:
    """got vs base (numpy dicts out/weights/lse) on ``rows`` (*lead, L) (None: all)."""
    for name in ("out", "weights", "lse"):
        a, b = got.get(name), base.get(name)
        if a is None or b is None:
            continue
        if rows is not None:
            a, b = a[rows], b[rows]
        assert_close(f"{name} {what}", a, b, tol[name], ctx)
        nan_a, nan_b = np.isnan(a), np.isnan(b)
        assert np.array_equal(nan_a, nan_b), (
            f"{name} {what}: NaN at {int(nan_a.sum())} places, expected {int(nan_b.sum())} ({ctx})"
        )


def _numpy_result(backend, res) -> dict[str, np.ndarray | None]:
    return dict(zip(("out", "weights", "lse"), (_np(backend, x) for x in res), strict=True))


def test_fuzz_attention(backend: Backend) -> None:
    """Every impl equals the oracle within the tolerance table, and the others."""

    @_settings(backend, "attention")
    @given(case=cases(backend.dtypes, _sizes(backend)))
    @example(case=EDGE_OF_REACH)
    @example(case=replace(EDGE_OF_REACH, dtype="float32", auto_block_size=None))
    def run(case: fo.FuzzCase) -> None:
        note(case.describe())
        check_attention(backend, case)

    run()


def check_attention(backend: Backend, case: fo.FuzzCase) -> None:
    """test_fuzz_attention's checks of one case, and attnkit.testing's assertion on it."""
    p = fo.build_problem(case)
    arrays = _arrays(backend, p)
    tol = _tols(p)
    first = None
    for impl, rw, rl in _variants(case):
        ctx = _context(backend, case, impl, rw, rl)
        res = _run(backend, arrays, case, impl, rw, rl, ctx)
        _check_result(backend, p, arrays, res, rw, rl, ctx)
        got = _numpy_result(backend, res)
        if first is None:
            first = (impl, got)
        else:  # impls against each other: each is within tol of gold
            twice = {name: 2 * t for name, t in tol.items()}
            _compare(f"({impl} vs {first[0]})", got, first[1], None, twice, ctx)
    _unchanged(backend, arrays, (p.q, p.k, p.v, p.mask), _context(backend, case, "*", 0, 0))
    if first is not None and first[1]["out"] is not None:
        kit_agrees(p, first[1]["out"], tol["out"])


def kit_agrees(p: fo.Problem, out: np.ndarray, tol: float) -> None:
    """The public ``attnkit.testing.assert_attention_close``, given the same call (structured
    masks as the oracle's dense array, a softcap as ``softcap``), accepts attnkit's output;
    with one entry moved far beyond the tolerance it fails, naming that row. On 1 case in 4
    (1 in 128 moved: naming the row runs the kit's detectors), which keeps its share of the
    fuzzer's time to a few seconds a session."""
    c = p.case
    draw = zlib.crc32(repr(c).encode())  # not the seed: hypothesis draws 0 often
    if draw % 4 or (c.score_mod is not None and c.score_mod[0] != "softcap"):
        return  # the kit's calls have no ALiBi
    call = {k: v for k, v in p.oracle_kwargs.items() if k != "score_mod" and v is not None}
    if c.score_mod is not None:
        call["softcap"] = c.score_mod[1]
    assert_attention_close(out, p.q, p.k, p.v, attn_mask=p.oracle_mask, dtype=c.dtype, **call)
    rows = np.isfinite(p.gold.lse) & np.all(np.isfinite(out), axis=-1)
    floors = isinstance(c.mask, fo.ArrayMask) and c.mask.floor != 0.0
    if draw % 128 or floors or not rows.any() or not out.shape[-1]:
        return
    row = tuple(int(i) for i in np.argwhere(rows)[0])
    moved = np.array(out, dtype=np.float64)
    moved[row] += 64 * tol + 0.5
    with pytest.raises(AttentionMismatch) as info:
        assert_attention_close(moved, p.q, p.k, p.v, attn_mask=p.oracle_mask, dtype=c.dtype, **call)
    where = str(row[0]) if len(row) == 1 else str(row)
    assert f"rows: {where}" in str(info.value), str(info.value)


POISON = st.tuples(
    st.sampled_from([math.nan, math.inf, -math.inf, 1e10]),  # into one key row
    st.integers(0, 2**16),  # which key slice
    st.integers(0, 2**16),  # which key row
    st.sampled_from([math.nan, math.inf, -math.inf]),  # into every dead value row
)


def _flat(x: np.ndarray) -> np.ndarray:
    """(..., N, X) -> (slices, N, X), a copy."""
    return np.array(x, dtype=np.float64).reshape(math.prod(x.shape[:-2]), *x.shape[-2:])


def poison_unused_rows(
    p: fo.Problem,
    c: fo.FuzzCase,
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    dead: Callable[[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]] | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, str]:
    """Copies of q, k, v with NaN in the query rows with nothing to attend and in the key
    and value rows no query may attend (``dead(dead_k, dead_v)`` may narrow those, each
    (slices, S) bool), and a label counting them."""
    lead = c.out_lead
    allowed = np.broadcast_to(p.gold.allowed, (*lead, c.L, c.S))
    q, k, v = _flat(q), _flat(k), _flat(v)
    dead_k = fo.dead_rows(allowed, fo.slice_ids(c.k, lead, c.groups), k.shape[0])
    dead_v = fo.dead_rows(allowed, fo.slice_ids(c.v, lead, c.groups), v.shape[0])
    if dead is not None:
        dead_k, dead_v = dead(dead_k, dead_v)
    q[fo.empty_query_rows(allowed, fo.slice_ids(c.q, lead), q.shape[0])] = math.nan
    k[dead_k] = math.nan
    v[dead_v] = math.nan
    q, k, v = q.reshape(c.q), k.reshape(c.k), v.reshape(c.v)
    label = (
        f"NaN in {int(np.isnan(q[..., 0]).sum())} empty query rows, "
        f"{int(np.isnan(k[..., 0]).sum())} dead key rows, "
        f"{int(np.isnan(v[..., 0]).sum())} dead value rows"
    )
    return q, k, v, label


def test_fuzz_poison(backend: Backend) -> None:
    """Poison shows only where the pinned semantics let it."""

    @_settings(backend, "poison")
    @given(case=cases(backend.dtypes, _sizes(backend)), poison=POISON)
    def run(case: fo.FuzzCase, poison) -> None:
        note(case.describe())
        check_poison(backend, case, poison)

    run()


def check_poison(backend: Backend, case: fo.FuzzCase, poison) -> None:
    """test_fuzz_poison's checks of one case and one draw of POISON."""
    key_poison, pick_slice, pick_row, value_poison = poison
    p = fo.build_problem(case)
    c, tol = case, _tols(p)
    lead = c.out_lead
    allowed = np.broadcast_to(p.gold.allowed, (*lead, c.L, c.S))
    empty = np.isneginf(p.gold.lse)
    ids_q = fo.slice_ids(c.q, lead)
    ids_k = fo.slice_ids(c.k, lead, c.groups)
    ids_v = fo.slice_ids(c.v, lead, c.groups)
    arrays = _arrays(backend, p)
    variants = _variants(case)
    base = {}
    for impl, rw, rl in variants:
        ctx = _context(backend, case, impl, rw, rl)
        base[impl, rw, rl] = _numpy_result(backend, _run(backend, arrays, case, impl, rw, rl, ctx))

    def poisoned(label: str, q=None, k=None, v=None):
        bad = _arrays(backend, p, q, k, v)
        for impl, rw, rl in variants:
            ctx = f"{label}; " + _context(backend, case, impl, rw, rl)
            yield (
                (impl, rw, rl),
                ctx,
                _numpy_result(backend, _run(backend, bad, case, impl, rw, rl, ctx)),
            )

    # (a) one key row: only the rows allowed to attend it may change; with NaN they
    # must be NaN (out and lse) on every impl.
    if c.L and c.S:
        k_bad = _flat(p.k)
        slice_, row = pick_slice % k_bad.shape[0], pick_row % c.S
        k_bad[slice_, row] = key_poison
        readers = fo.key_row_readers(allowed, ids_k, slice_, row)
        label = (
            f"key[slice {slice_}, row {row}] = {key_poison} (flat key slices "
            f"{k_bad.shape[0]}), read by {int(readers.sum())} rows"
        )
        for v_, ctx, got in poisoned(label, k=k_bad.reshape(c.k)):
            _compare("(poisoned key, rows not reading it)", got, base[v_], ~readers, tol, ctx)
            if math.isnan(key_poison) and readers.any():
                out = got["out"][readers]
                assert np.isnan(out).all(), (
                    f"rows attending a NaN key must be NaN: {int((~np.isnan(out)).sum())} "
                    f"of {out.size} outputs are numbers ({ctx})"
                )
                if got["lse"] is not None:
                    lse = got["lse"][readers]
                    assert np.isnan(lse).all(), (
                        f"lse of rows attending a NaN key must be NaN, got "
                        f"{lse[~np.isnan(lse)][:4].tolist()} ({ctx})"
                    )

    # (b) every value row no query may attend: nothing changes.
    v_bad = _flat(p.v)
    dead = fo.dead_rows(allowed, ids_v, v_bad.shape[0])
    if dead.any() and c.L:
        v_bad[dead] = value_poison
        label = f"value = {value_poison} on {int(dead.sum())} dead rows {_where(dead)}"
        for v_, ctx, got in poisoned(label, v=v_bad.reshape(c.v)):
            _compare("(poisoned dead values)", got, base[v_], None, tol, ctx)

    # (c) NaN in the query rows of rows with nothing to attend: they stay 0 / -inf.
    q_bad = _flat(p.q)
    dead_q = fo.empty_query_rows(allowed, ids_q, q_bad.shape[0])
    if dead_q.any():
        q_bad[dead_q] = math.nan
        label = f"query = nan on {int(dead_q.sum())} empty rows {_where(dead_q)}"
        for v_, ctx, got in poisoned(label, q=q_bad.reshape(c.q)):
            _compare("(NaN queries of empty rows)", got, base[v_], None, tol, ctx)
            assert np.all(got["out"][empty] == 0.0), f"empty rows must stay 0 ({ctx})"
            if got["lse"] is not None:
                assert np.all(np.isneginf(got["lse"][empty])), f"lse must stay -inf ({ctx})"


def _where(mask: np.ndarray) -> str:
    idx = [tuple(int(i) for i in x) for x in np.argwhere(mask)[:6]]
    return f"(slice, row) {idx}{' ...' if mask.sum() > 6 else ''}"


def test_fuzz_gradients(backend: Backend) -> None:
    """Gradients equal the oracle's (float64); poison in dead keys, dead values and empty
    query rows leaves them finite and unchanged."""
    if not backend.has_grad:
        pytest.skip(f"{backend.name} has no automatic differentiation")

    @_settings(backend, "gradients")
    @given(
        case=cases(backend.dtypes, _sizes(backend), gradients=True),
        impl=st.sampled_from(IMPLS),
        poison=st.booleans(),
    )
    @example(case=EDGE_OF_REACH, impl="auto", poison=True)
    def run(case: fo.FuzzCase, impl: str, poison: bool) -> None:
        note(case.describe())
        check_gradients(backend, case, impl, poison)

    run()


def check_gradients(backend: Backend, case: fo.FuzzCase, impl: str, poison: bool) -> None:
    """test_fuzz_gradients's checks of one case."""
    p = fo.build_problem(case)
    c = case
    lead = c.out_lead
    q, k, v = p.q, p.k, p.v
    label = "no poison"
    if poison:
        q, k, v, label = poison_unused_rows(p, c, q, k, v)
    dout = np.random.default_rng(c.seed + 1).standard_normal((*lead, c.L, c.v[-1]))
    want = fo.ref.attention_grad(q, k, v, dout, attn_mask=p.oracle_mask, **p.oracle_kwargs)
    qb, kb, vb, mask = _arrays(backend, p, q, k, v)
    kw = _kwargs(case, impl, False, False)
    ctx = f"{label}; " + _context(backend, case, impl, False, False)
    try:
        fn = ak.scaled_dot_product_attention
        got = backend.grads(fn, qb, kb, vb, dout, attn_mask=mask, **kw)
    except Exception as e:
        raise AssertionError(f"the backward pass raised {type(e).__name__}: {e} ({ctx})") from e
    scale = max(1.0, float(np.max(np.abs(dout), initial=0.0)))
    for name, g, gold in zip(("dquery", "dkey", "dvalue"), got, want, strict=True):
        assert not np.isnan(g).any(), f"{name} has {int(np.isnan(g).sum())} NaN ({ctx})"
        assert_close(name, g, gold, exact_allowed("float64", p.score_max, gold) * scale, ctx)
    empty = np.isneginf(p.gold.lse)
    if empty.any() and got[0].shape[:-1] == empty.shape:
        assert np.all(got[0][empty] == 0.0), f"dquery of empty rows must be 0 ({ctx})"
