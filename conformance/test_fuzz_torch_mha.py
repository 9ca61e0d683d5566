"""Differential fuzzing of attnkit's PyTorch drop-in
(``attnkit.backends.torch.nn.MultiheadAttention``) against ``torch.nn.MultiheadAttention``
itself, with torch's weights loaded through ``load_state_dict`` (issue 26, item 8).

Drawn: embed_dim and num_heads, batch_first both ways, batched and unbatched inputs,
self-attention (one tensor for query, key and value), kdim/vdim (separate projection
weights), bias, add_bias_kv, add_zero_attn, L and S from 1, a bool or additive float
key_padding_mask (finite values and -inf or a large finite negative, batch rows fully
padded), a 2-D (L, S) or 3-D (B * num_heads, L, S) bool or float attn_mask (query rows
fully masked), is_causal with the causal attn_mask torch requires, need_weights with
average_attn_weights both ways, float64 and float32, eval mode (dropout 0 or 0.5, never
applied), non-contiguous inputs, torch.no_grad (torch's native fast path where it
applies), and the gradients of a random linear functional of the output (and weights)
with respect to the inputs and parameters.

Oracle: torch's module. Rows with a key to attend equal torch's output and weights. A
(batch, head, query) row with no key left is NaN in torch; attnkit's contract is
attention 0 there (weights 0, no NaN, finite gradients), so the output is checked against
torch's per-head weights with those rows zeroed, pushed through torch's own value and
output projections. Gradients are compared where no row is fully masked (torch's are NaN
otherwise). A combination torch refuses must be refused by the drop-in too (the drawn
ones are legal; ``test_refused_by_both`` lists illegal ones)."""

from __future__ import annotations

import contextlib
from typing import Any

import hypothesis.strategies as st
import pytest
from hypothesis import HealthCheck, event, example, given, note, settings

torch = pytest.importorskip("torch")
F = pytest.importorskip("torch.nn.functional")

from attnkit.backends.torch.nn import MultiheadAttention  # noqa: E402

from attnkit.errors import AttnkitError  # noqa: E402


@pytest.fixture(autouse=True)
def _torch_session_only(request: pytest.FixtureRequest) -> None:
    """The torch drop-in is fuzzed once, in the torch conformance session
    (``--backend=torch``); the other sessions skip it."""
    if request.config.getoption("--backend") != "torch":
        pytest.skip("the torch drop-in is fuzzed in the torch session (--backend=torch)")


# PyTorch warns when key_padding_mask and attn_mask differ in type; the mix is drawn here.
pytestmark = pytest.mark.filterwarnings("ignore:Support for mismatched key_padding_mask")

TOL = {"float64": 1e-10, "float32": 2e-5}  # relative to the largest |expected|
GRAD_TOL = {"float64": 1e-9, "float32": 1e-4}  # a few more roundings through backward
# a finite "masked" value of a float mask: the key stays live, its weight about 0 (a row of
# them is uniform); large, yet its rounding in the scores below the dtype's tolerance
FAR = {"float64": -1e4, "float32": -50.0}
MASKS = ["none", "bool2d", "float2d", "bool3d", "float3d"]


@st.composite
def calls(draw: Any) -> dict[str, Any]:
    """One legal ``torch.nn.MultiheadAttention`` construction and call, as plain data."""
    heads = draw(st.integers(1, 4))
    extras = draw(st.sampled_from([False, False, "bias_kv", "zero_attn", "both"]))
    self_attention = draw(st.booleans()) and draw(st.booleans())  # one tensor for q, k, v
    kdim = None if self_attention else draw(st.one_of(st.none(), st.integers(1, 9)))
    vdim = None if self_attention else draw(st.one_of(st.none(), st.integers(1, 9)))
    L = draw(st.one_of(st.just(1), st.integers(1, 6), st.sampled_from([17, 40])))
    S = L if self_attention else draw(st.one_of(st.just(1), st.integers(1, 7), st.just(70)))
    # is_causal is a hint that attn_mask is the causal mask; with an appended bias_k or zero
    # key torch keeps those columns on one path and masks them on another: not drawn.
    is_causal = not extras and draw(st.booleans()) and draw(st.booleans())
    mask = draw(st.sampled_from(MASKS[1:] if is_causal else MASKS))
    unbatched = draw(st.booleans()) and draw(st.booleans())
    return {
        "heads": heads,
        "head_dim": draw(st.sampled_from([1, 2, 3, 5, 8])),
        "batch_first": draw(st.booleans()),
        "bias": draw(st.booleans()),
        "add_bias_kv": extras in ("bias_kv", "both"),
        "add_zero_attn": extras in ("zero_attn", "both"),
        "kdim": kdim,
        "vdim": vdim,
        "self_attention": self_attention,
        "B": 1 if unbatched else draw(st.integers(1, 3)),
        "L": L,
        "S": S,
        "unbatched": unbatched,
        "kpm": draw(st.sampled_from(["none", "bool", "float"])),
        "pad_row": draw(
            st.sampled_from([True, False])
        ),  # one batch row of key_padding_mask all padding
        "mask": mask,
        "dead_query": draw(st.sampled_from([True, False])),  # one query row of attn_mask all masked
        "far": draw(
            st.sampled_from([False, False, True])
        ),  # float masks: FAR instead of -inf (nothing dead)
        "is_causal": is_causal,
        "need_weights": draw(st.booleans()),
        "average": draw(st.booleans()),
        "dtype": draw(st.sampled_from(["float64", "float32"])),
        "amplitude": draw(st.sampled_from([1.0, 4.0])),  # 4: peaked softmax rows
        "strided": draw(st.booleans()),  # inputs as transposed views, not contiguous
        "dropout": draw(st.sampled_from([0.0, 0.5])),  # eval mode: never applied
        "no_grad": draw(st.booleans()),  # inference: torch may take its native fast path
        "seed": draw(st.integers(0, 2**16)),
    }


def _masks(c: dict[str, Any], g: torch.Generator, dt: torch.dtype) -> tuple[Any, Any, Any]:
    """key_padding_mask, attn_mask (torch's convention: bool True = not allowed, float
    added) and the (B, H, L, S) bool of the keys each row may attend (before bias_k and
    the zero key, which every row may attend)."""
    B, H, L, S = c["B"], c["heads"], c["L"], c["S"]
    allowed = torch.ones(B, H, L, S, dtype=torch.bool)
    neg = FAR[c["dtype"]] if c["far"] else -torch.inf
    kpm = None
    if c["kpm"] != "none":
        keep = torch.rand(B, S, generator=g) < 0.7
        if c["pad_row"]:
            keep[int(torch.randint(B, (1,), generator=g))] = False
        if c["kpm"] == "bool":
            kpm = ~keep
        else:  # finite additive values where kept, -inf (or FAR) where padded
            kpm = torch.where(keep, 3 * torch.randn(B, S, generator=g, dtype=dt), neg)
        if c["kpm"] == "bool" or not c["far"]:
            allowed &= keep[:, None, None, :]
    attn_mask = None
    if c["mask"] != "none":
        three_d = c["mask"].endswith("3d")
        shape = (B * H, L, S) if three_d else (L, S)
        if c["is_causal"]:  # exactly the causal mask: torch may use is_causal instead of it
            allow = torch.ones(L, S, dtype=torch.bool).tril().expand(shape).clone()
        else:
            allow = torch.rand(shape, generator=g) < 0.7
            if c["dead_query"]:
                allow[..., int(torch.randint(L, (1,), generator=g)), :] = False
        if c["mask"].startswith("bool") or not c["far"] or c["is_causal"]:  # -inf
            allowed &= allow.reshape(B, H, L, S) if three_d else allow
        if c["mask"].startswith("bool"):
            attn_mask = ~allow
        elif c["is_causal"]:
            attn_mask = torch.zeros(shape, dtype=dt).masked_fill(~allow, -torch.inf)
        else:
            attn_mask = torch.where(allow, 3 * torch.randn(shape, generator=g, dtype=dt), neg)
        if c["unbatched"] and three_d:
            attn_mask = attn_mask.reshape(H, L, S)
    if kpm is not None and c["unbatched"]:
        kpm = kpm[0]
    return kpm, attn_mask, allowed


def _inputs(c: dict[str, Any], g: torch.Generator, dt: torch.dtype) -> list[torch.Tensor]:
    """query, key, value in the module's layout (fresh normal values, never zeros)."""
    D = c["heads"] * c["head_dim"]
    kd, vd = c["kdim"] or D, c["vdim"] or D

    def x(n: int, d: int) -> torch.Tensor:
        t = c["amplitude"] * torch.randn(c["B"], n, d, generator=g, dtype=dt)
        if c["unbatched"]:
            return t[0] if not c["strided"] else t[0].T.contiguous().T
        if c["strided"]:  # (B, n, d) <-> (n, B, d) as a transposed view
            t = t.transpose(0, 1).contiguous().transpose(0, 1)
        return t if c["batch_first"] else t.transpose(0, 1)

    if c["self_attention"]:
        q = x(c["L"], D)
        return [q, q, q]
    return [x(c["L"], D), x(c["S"], kd), x(c["S"], vd)]


def _modules(c: dict[str, Any], dt: torch.dtype) -> tuple[Any, Any]:
    """torch's module with random non-zero biases, and the drop-in with its state_dict."""
    D = c["heads"] * c["head_dim"]
    kw = {k: c[k] for k in ("bias", "add_bias_kv", "add_zero_attn", "kdim", "vdim")}
    kw.update(batch_first=c["batch_first"], dropout=c["dropout"], dtype=dt)
    torch.manual_seed(c["seed"])
    theirs = torch.nn.MultiheadAttention(D, c["heads"], **kw).eval()
    ours = MultiheadAttention(D, c["heads"], **kw).eval()
    with torch.no_grad():  # torch zeroes the biases; random ones are tested too
        for name, p in theirs.named_parameters():
            if "bias" in name:
                p.normal_()
    state = theirs.state_dict()
    assert list(ours.state_dict()) == list(state), "state_dict names differ from torch's"
    ours.load_state_dict(state)
    return theirs, ours


def _batch_first(c: dict[str, Any], t: torch.Tensor) -> torch.Tensor:
    """(B, N, d) from the module's layout."""
    if c["unbatched"]:
        return t[None]
    return t if c["batch_first"] else t.transpose(0, 1)


def _from_weights(
    c: dict[str, Any], theirs: Any, w: torch.Tensor, value: torch.Tensor
) -> torch.Tensor:
    """torch's output recomputed from per-head weights ``w`` (B, H, L, S'), with torch's
    value and output projections (the oracle where ``w`` has rows zeroed)."""
    B, H, E = c["B"], c["heads"], c["head_dim"]
    D = H * E
    if theirs.in_proj_weight is not None:
        wv = theirs.in_proj_weight[2 * D :]
    else:
        wv = theirs.v_proj_weight
    bv = None if theirs.in_proj_bias is None else theirs.in_proj_bias[2 * D :]
    v = F.linear(_batch_first(c, value), wv, bv)  # (B, S, D)
    if theirs.bias_v is not None:
        v = torch.cat([v, theirs.bias_v.expand(B, 1, D)], 1)
    if c["add_zero_attn"]:
        v = torch.cat([v, v.new_zeros(B, 1, D)], 1)
    o = w @ v.reshape(B, -1, H, E).transpose(1, 2)  # (B, H, L, E)
    out = theirs.out_proj(o.transpose(1, 2).reshape(B, c["L"], D))  # (B, L, D)
    if c["unbatched"]:
        return out[0]
    return out if c["batch_first"] else out.transpose(0, 1)


def _rel_err(got: torch.Tensor, want: torch.Tensor, floor: float) -> float:
    """max |got - want| over max(max |want|, floor)."""
    got, want = got.detach().double(), want.detach().double()
    if got.numel() == 0:
        return 0.0
    return float((got - want).abs().max() / want.abs().max().clamp_min(floor))


def _check(
    what: str, got: torch.Tensor, want: torch.Tensor, tol: float, floor: float = 1e-3
) -> None:
    """Relative error at most ``tol``; below ``floor`` (an exact 0 gradient, say) absolute."""
    assert got.shape == want.shape, f"{what}: shape {tuple(got.shape)} != {tuple(want.shape)}"
    assert not torch.isnan(got).any(), f"{what}: NaN in attnkit's result"
    err = _rel_err(got, want, floor)
    assert err <= tol, f"{what}: relative error {err:.3e} > allowed {tol:.1e}"


BASE = {"heads": 2, "head_dim": 3, "batch_first": True, "bias": True, "add_bias_kv": False,
        "add_zero_attn": False, "kdim": None, "vdim": None, "self_attention": False, "B": 3,
        "L": 4, "S": 5, "unbatched": False, "kpm": "none", "pad_row": False, "mask": "none",
        "dead_query": False, "far": False, "is_causal": False, "need_weights": True,
        "average": True, "dtype": "float64", "amplitude": 1.0, "strided": False,
        "dropout": 0.0, "no_grad": False, "seed": 7}  # fmt: skip


@settings(max_examples=60, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow])  # fmt: skip
@given(calls())
# a float key_padding_mask whose padded batch row is all -inf: torch NaN, attnkit 0
@example({**BASE, "kpm": "float", "pad_row": True, "batch_first": False})
# a 3-D attn_mask with a dead query row, weights per head
@example({**BASE, "mask": "bool3d", "dead_query": True, "average": False, "dtype": "float32"})
# bias_k and the zero key appended, with a bool key_padding_mask and a padded row
@example({**BASE, "add_bias_kv": True, "add_zero_attn": True, "kpm": "bool", "pad_row": True})
# kdim/vdim != embed_dim: separate q/k/v projection weights
@example({**BASE, "kdim": 7, "vdim": 2, "mask": "float2d", "need_weights": False})
# is_causal with its causal mask, L != S, per-head float 3-D mask
@example({**BASE, "is_causal": True, "mask": "float3d", "L": 5, "S": 3, "need_weights": False})
# inference on torch's native fast path (even heads, batch_first, one tensor, bool masks)
@example({**BASE, "self_attention": True, "S": 4, "kpm": "bool", "pad_row": True,
          "need_weights": False, "no_grad": True})  # fmt: skip
def test_fuzz_torch_multihead_drop_in(c: dict[str, Any]) -> None:
    note(repr(c))
    dt = getattr(torch, c["dtype"])
    tol, gtol = TOL[c["dtype"]], GRAD_TOL[c["dtype"]]
    g = torch.Generator().manual_seed(c["seed"])
    theirs, ours = _modules(c, dt)
    inputs = _inputs(c, g, dt)
    kpm, attn_mask, allowed = _masks(c, g, dt)
    kw = {"key_padding_mask": kpm, "attn_mask": attn_mask, "is_causal": c["is_causal"]}
    call = {**kw, "need_weights": c["need_weights"], "average_attn_weights": c["average"]}

    def leaves() -> list[torch.Tensor]:
        grad = not c["no_grad"]
        if c["self_attention"]:  # the same tensor: torch's query-is-key paths
            x = inputs[0].clone().requires_grad_(grad)
            return [x, x, x]
        return [t.clone().requires_grad_(grad) for t in inputs]

    their_in, our_in = leaves(), leaves()
    with torch.no_grad() if c["no_grad"] else contextlib.nullcontext():
        try:
            want_out, want_w = theirs(*their_in, **call)
        except (RuntimeError, AssertionError, ValueError, TypeError) as e:
            note(f"torch refuses: {e}")
            event("torch refuses the call")
            with pytest.raises((AttnkitError, ValueError, TypeError)):
                ours(*our_in, **call)
            return
        got_out, got_w = ours(*our_in, **call)
    # torch's per-head weights, with rows that have no key (NaN in torch) zeroed
    with torch.no_grad():
        _, heads_w = theirs(*inputs, **kw, need_weights=True, average_attn_weights=False)
    heads_w = heads_w if not c["unbatched"] else heads_w[None]  # (B, H, L, S')
    extras = c["add_bias_kv"] or c["add_zero_attn"]
    dead = ~allowed.any(-1) & (not extras)  # (B, H, L)
    assert not torch.isnan(heads_w[~dead]).any(), "torch gave NaN in a row with keys"
    heads_w = heads_w.masked_fill(dead[..., None], 0)
    note(f"rows with no key: {int(dead.sum())} of {dead.numel()}")
    event("some row with no key" if dead.any() else "every row has a key")

    # output: against the zeroed-rows oracle everywhere, and torch itself where it is finite
    assert got_out.dtype == want_out.dtype, f"dtype {got_out.dtype} != {want_out.dtype}"
    with torch.no_grad():
        oracle = _from_weights(c, theirs, heads_w, inputs[2])
    _check("output vs torch weights with dead rows 0", got_out, oracle, tol)
    live = ~torch.isnan(want_out)
    _check("output vs torch (rows torch computes)", got_out[live], want_out[live], tol)
    # weights
    if not c["need_weights"]:
        assert got_w is None and want_w is None, "weights returned without need_weights"
    else:
        want = heads_w.mean(1) if c["average"] else heads_w
        want = want[0] if c["unbatched"] else want
        _check("weights vs torch with dead rows 0", got_w, want, tol)
        live = ~torch.isnan(want_w)
        _check("weights vs torch (rows torch computes)", got_w[live], want_w[live], tol)
        rows = got_w[None] if c["unbatched"] else got_w
        rows = rows[dead.all(1)] if c["average"] else rows[dead]
        assert (rows == 0).all(), "weights of a row with no key are not 0"

    if c["no_grad"]:
        assert not got_out.requires_grad, "a graph was recorded under torch.no_grad"
        return
    # gradients of a random linear functional of output (and weights)
    grads = []
    runs = ((theirs, (want_out, want_w), their_in), (ours, (got_out, got_w), our_in))
    for module, outs, xs in runs:
        gg = torch.Generator().manual_seed(c["seed"] + 1)
        loss = sum(
            (t * torch.randn(t.shape, generator=gg, dtype=t.dtype)).sum()
            for t in outs
            if t is not None
        )
        module.zero_grad()
        loss.backward()
        named = {n: p.grad for n, p in module.named_parameters()}
        unique = [xs[0]] if c["self_attention"] else xs
        grads.append({**named, **{f"input {i}": x.grad for i, x in enumerate(unique)}})
    assert grads[0].keys() == grads[1].keys()
    for name, got in grads[1].items():
        assert got is not None, f"no gradient for {name}"
        assert torch.isfinite(got).all(), f"grad {name}: not finite"
        if not dead.any():
            _check(f"grad {name}", got, grads[0][name], gtol, floor=1.0)


_F64, _BOOL = {"dtype": torch.float64}, {"dtype": torch.bool}
REFUSED = {  # torch refuses these calls; so does the drop-in, with attnkit's typed error
    "int attn_mask": ({"attn_mask": torch.zeros(3, 5, dtype=torch.int64)}, TypeError),
    "uint8 key_padding_mask": ({"key_padding_mask": torch.zeros(2, 5, dtype=torch.uint8)},
                               TypeError),
    "attn_mask (L, S + 1)": ({"attn_mask": torch.zeros(3, 6, **_BOOL)}, ValueError),
    "attn_mask (1, L, S)": ({"attn_mask": torch.zeros(1, 3, 5, **_BOOL)}, ValueError),
    "key_padding_mask (B, S + 1)": ({"key_padding_mask": torch.zeros(2, 6, **_BOOL)},
                                    ValueError),
    "4-D query": ({"query": torch.randn(1, 2, 3, 4, **_F64)}, ValueError),
    "value shorter than key": ({"value": torch.randn(2, 4, 4, **_F64)}, ValueError),
    "float32 query, float64 module": ({"query": torch.randn(2, 3, 4)}, TypeError),
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_refused_by_both(name: str) -> None:
    """Calls torch's module refuses (batch_first, B=2, L=3, S=5, D=4, 2 heads, float64):
    the drop-in refuses each with an attnkit error of the builtin class a caller expects."""
    change, builtin = REFUSED[name]
    torch.manual_seed(0)
    theirs = torch.nn.MultiheadAttention(4, 2, batch_first=True, dtype=torch.float64).eval()
    ours = MultiheadAttention(4, 2, batch_first=True, dtype=torch.float64).eval()
    ours.load_state_dict(theirs.state_dict())
    q, k = torch.randn(2, 3, 4, dtype=torch.float64), torch.randn(2, 5, 4, dtype=torch.float64)
    args = {"query": q, "key": k, "value": k, **change}
    with pytest.raises((RuntimeError, AssertionError)):
        theirs(**args)
    with pytest.raises(AttnkitError) as info:
        ours(**args)
    assert isinstance(info.value, builtin), f"{type(info.value).__name__} is no {builtin.__name__}"
