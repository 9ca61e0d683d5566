"""PyTorch's run kernel (backends/torch/kernels.py ``block_run``): the interior of a window
in one SDPA call. Checked against the generic executor and the float64 reference (outputs
and gradients, the backward pass in several pieces, torch.func), its dispatch (one SDPA
call for the run), its fallbacks, and its backward memory in a fresh process.
"""

from __future__ import annotations

import os

import pytest
from _helpers import PROC_STATUS, printed_int
from attnkit.backends import load

import attnkit as ak
from attnkit import masks
from attnkit.blocked import executor
from attnkit.blocked.translated_runs import Run

torch = pytest.importorskip("torch")


@pytest.fixture
def runs(monkeypatch: pytest.MonkeyPatch) -> list[Run]:
    seen: list[Run] = []
    real = executor._attend_run

    def spy(p, ops, kernels, run):
        seen.append(run)
        return real(p, ops, kernels, run)

    monkeypatch.setattr(executor, "_attend_run", spy)
    return seen


def _qkv(shape_q, shape_kv, seed=0, requires_grad=False):
    g = torch.Generator().manual_seed(seed)
    return tuple(
        torch.randn(s, generator=g, dtype=torch.float64).requires_grad_(requires_grad)
        for s in (shape_q, shape_kv, shape_kv)
    )


CASES = [
    ((2, 3, 333, 16), (2, 3, 333, 16), {"window": (40, 13)}),
    ((333, 16), (333, 16), {"window": (40, 40)}),  # rank 2
    ((3, 301, 8), (3, 420, 8), {"window": (64, 0), "q_offset": 70}),  # causal window, L < S
    ((1, 2, 300, 16), (1, 2, 300, 16), {"window": (50, 50), "kv_offset": 9}),
    (
        (1, 2, 400, 16),
        (1, 2, 400, 16),
        {"attn_mask": masks.sliding_window((30, 0)) | masks.sliding_window((0, 70))},
    ),
    ((1, 2, 400, 16), (1, 2, 400, 16), {"window": (100, 100), "is_causal": True}),
]


@pytest.mark.parametrize("shape_q, shape_kv, kwargs", CASES)
def test_torch_run_equals_reference(runs: list, shape_q, shape_kv, kwargs) -> None:
    q, k, v = _qkv(shape_q, shape_kv)
    out = ak.scaled_dot_product_attention(q, k, v, **kwargs)
    assert len(runs) == 1, f"expected the window's interior as one run, got {runs}"
    ref = ak.scaled_dot_product_attention(q, k, v, impl="reference", **kwargs)
    generic = ak.scaled_dot_product_attention(q, k, v, impl="generic", **kwargs)
    for name, other in (("reference", ref), ("generic", generic)):
        err = float((out - other).abs().max())
        assert err <= 1e-12, f"run vs {name}: {err:.2e} > 1e-12"


def test_torch_run_is_one_sdpa_call(monkeypatch: pytest.MonkeyPatch, runs: list) -> None:
    calls = []
    real = torch.nn.functional.scaled_dot_product_attention

    def spy(q, *args, **kwargs):
        calls.append(tuple(q.shape))
        return real(q, *args, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", spy)
    q, k, v = _qkv((1, 4, 2000, 16), (1, 4, 2000, 16))
    ak.scaled_dot_product_attention(q, k, v, window=(100, 100))
    (run,) = runs
    assert (run.q_lo, run.q_hi, run.rows, run.width) == (128, 1888, 32, 232)
    assert (4, run.blocks, 32, 16) in calls  # all 55 blocks in one call
    assert len(calls) <= 6, f"the clipped blocks at both ends should take a few calls: {calls}"


@pytest.mark.parametrize(
    "layout, calls",
    [
        ("contiguous", [(6, 32)]),  # batch and heads merged as a view: one call
        ("transposed", [(3, 32), (3, 32)]),  # (B, L, H, E) seen as (B, H, L, E): per batch
        ("rank5", [(12, 32)]),
    ],
)
def test_torch_run_never_copies_unfolded_keys(
    monkeypatch: pytest.MonkeyPatch, runs: list, layout: str, calls: list
) -> None:
    """SDPA gets the run's keys as an overlapping view (block i starts 32 rows after
    block i - 1, not a window's width after it) whatever the operands' strides; where
    the leading dims cannot merge as a view, the run loops over the first one."""
    seen = []
    real = torch.nn.functional.scaled_dot_product_attention

    def spy(q, k, v, *args, **kwargs):
        if q.ndim == 4 and q.shape[-2] == 32:
            seen.append((q.shape[0], q.shape[-2]))
            assert k.stride(-3) == 32 * k.stride(-2), f"keys copied: strides {k.stride()}"
            assert v.stride(-3) == 32 * v.stride(-2), f"values copied: strides {v.stride()}"
        return real(q, k, v, *args, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", spy)
    g = torch.Generator().manual_seed(7)
    if layout == "transposed":
        q, k, v = (torch.randn(2, 300, 3, 8, generator=g).transpose(1, 2) for _ in range(3))
    elif layout == "rank5":
        q, k, v = (torch.randn(2, 2, 3, 300, 8, generator=g) for _ in range(3))
    else:
        q, k, v = (torch.randn(2, 3, 300, 8, generator=g) for _ in range(3))
    out = ak.scaled_dot_product_attention(q, k, v, window=(40, 40))
    assert runs and seen == calls, seen
    ref = ak.scaled_dot_product_attention(
        q.double(), k.double(), v.double(), window=(40, 40), impl="reference"
    )
    err = float((out.double() - ref).abs().max())
    assert err <= 1e-5, f"{layout}: {err:.2e} > 1e-5"


@pytest.mark.parametrize(
    "kwargs",
    [
        {"enable_gqa": True},  # key heads differ from query heads: SDPA per block
        {"attn_mask": "dense"},  # a dense mask differs from block to block
        {"declined": True},  # the kernel declines: the run's rows go block by block
    ],
)
def test_torch_run_fallbacks(monkeypatch: pytest.MonkeyPatch, kwargs: dict) -> None:
    kwargs = dict(kwargs)
    q, k, v = _qkv((1, 4, 300, 16), (1, 4 // (2 if kwargs.get("enable_gqa") else 1), 300, 16))
    if kwargs.pop("declined", False):
        import dataclasses

        backend = ak.backends.load("torch")
        declining = dataclasses.replace(backend.kernels, run=lambda *args: None)
        monkeypatch.setattr(backend, "kernels", declining)
    if kwargs.get("attn_mask") == "dense":
        kwargs["attn_mask"] = torch.rand(300, 300, generator=torch.Generator().manual_seed(1)) > 0.2
    out = ak.scaled_dot_product_attention(q, k, v, window=(40, 40), **kwargs)
    ref = ak.scaled_dot_product_attention(q, k, v, window=(40, 40), impl="reference", **kwargs)
    err = float((out - ref).abs().max())
    assert err <= 1e-12, f"{kwargs}: {err:.2e} > 1e-12"


@pytest.mark.parametrize("needs", ["qkv", "q", "kv"])
def test_torch_run_gradients_in_pieces(monkeypatch: pytest.MonkeyPatch, runs: list, needs: str):
    """The run kernel's backward pass in pieces of a few blocks each (not one) equals the
    float64 reference for every operand that asks for a gradient. Under autograd ``auto``
    takes attnkit's own backward; the run kernel's is what torch.func's transforms and
    torch.compile differentiate, reached here by withholding the former."""
    from attnkit.backends.torch import kernels

    monkeypatch.setattr(load("torch"), "custom_vjp", None)
    monkeypatch.setattr(kernels, "GRAD_PIECE_ELEMENTS", 3 * 2 * 2 * 100 * 16)  # 3 blocks a piece
    base = _qkv((2, 2, 357, 16), (2, 2, 357, 16), seed=4)
    weight = torch.randn(357, 16, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    grads = []
    for impl in ("auto", "reference"):
        leaves = [
            x.clone().requires_grad_(name in needs) for name, x in zip("qkv", base, strict=True)
        ]
        out = ak.scaled_dot_product_attention(*leaves, window=(34, 34), impl=impl)
        (out * weight).sum().backward()
        grads.append([x.grad for x in leaves])
    assert runs and runs[0].width == 100 and runs[0].blocks >= 7  # 3 pieces or more
    for name, a, b in zip("qkv", *grads, strict=True):
        if name not in needs:
            assert a is None and b is None
            continue
        err = float((a - b).abs().max())
        assert err <= 1e-12, f"grad {name}: {err:.2e} > 1e-12"


def test_torch_run_under_torch_func_grad(runs: list) -> None:
    q, k, v = _qkv((1, 2, 300, 16), (1, 2, 300, 16), seed=6)

    def loss(impl):
        return lambda q, k, v: (
            ak.scaled_dot_product_attention(q, k, v, window=(40, 40), impl=impl).square().sum()
        )

    got = torch.func.grad(loss("auto"), argnums=(0, 1, 2))(q, k, v)
    want = torch.func.grad(loss("reference"), argnums=(0, 1, 2))(q, k, v)
    assert runs
    for name, a, b in zip("qkv", got, want, strict=True):
        err = float((a - b).abs().max())
        assert err <= 1e-12, f"torch.func.grad {name}: {err:.2e} > 1e-12"


_PEAK = (
    PROC_STATUS
    + """
import sys, torch, attnkit as ak
from attnkit.backends import load
from attnkit.backends.torch import kernels

kernels.GRAD_PIECE_ELEMENTS = 2**40 if sys.argv[1] == "one-piece" else 2**21  # 8 MiB pieces
load("torch").custom_vjp = None  # the run kernel's own backward (torch.func, torch.compile)
w = [torch.randn(1, 2, 512, 16, requires_grad=True) for _ in range(3)]  # warm-up
ak.scaled_dot_product_attention(*w, window=(128, 128)).sum().backward()
q, k, v = (torch.randn(1, 4, 16384, 64, requires_grad=True) for _ in range(3))
before = status("VmRSS:")
out = ak.scaled_dot_product_attention(q, k, v, window=(128, 128))
out.square().sum().backward()
print(status("VmHWM:") - before)
"""
)


def _peak_mib(mode: str) -> float:
    return printed_int(_PEAK, mode) / 1024


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="reads Linux /proc")
def test_torch_run_backward_memory_in_pieces() -> None:
    """4 heads x 16384 x 64 float32 keys are 16 MiB; SDPA's gradient of the unfolded keys
    and values of a window of 257 in blocks of 32 is 9 times that each (288 MiB). In
    pieces the backward pass holds the gradients (48 MiB), the output and its gradient
    (32 MiB) and one piece's unfolded gradients; in one piece all of them."""
    pieces, whole = _peak_mib("pieces"), _peak_mib("one-piece")
    unfolded = 2 * 9 * 16
    assert whole >= unfolded, (whole, unfolded)
    assert pieces <= whole - 0.5 * unfolded, (
        f"forward + backward grew the peak by {pieces:.0f} MiB in pieces, {whole:.0f} MiB "
        f"in one piece; the unfolded gradients are {unfolded} MiB"
    )
    assert pieces <= 200, f"peak growth {pieces:.0f} MiB > 200 MiB"


def test_auto_under_autograd_takes_attnkits_backward(runs: list) -> None:
    """A window under autograd: ``auto`` runs the run kernel with its lse (the fused CPU
    flash kernel) inside attnkit's autograd function, which records nothing of it, and
    attnkit's backward (the fused backward on the run and its edges), equal to the
    float64 reference; without gradients the run kernel takes the forward as well.
    explain says which backward runs."""
    q, k, v = _qkv((1, 2, 300, 16), (1, 2, 300, 16), seed=8)
    leaves = [x.clone().requires_grad_(True) for x in (q, k, v)]
    out = ak.scaled_dot_product_attention(*leaves, window=(40, 40))
    assert runs, "the run kernel no longer takes the forward saving lse"
    assert type(out.grad_fn).__name__ == "_AttentionFunctionBackward", out.grad_fn
    runs.clear()
    got = torch.autograd.grad(out.square().sum(), leaves)
    ref = [x.clone().requires_grad_(True) for x in (q, k, v)]
    want_out = ak.scaled_dot_product_attention(*ref, window=(40, 40), impl="reference")
    want = torch.autograd.grad(want_out.square().sum(), ref)
    assert float((out - want_out).abs().max()) <= 1e-12
    for name, a, b in zip("qkv", got, want, strict=True):
        err = float((a - b).abs().max())
        assert err <= 1e-12, f"grad {name}: {err:.2e} > 1e-12"
    with torch.no_grad():
        ak.scaled_dot_product_attention(q, k, v, window=(40, 40))
    assert runs, "the run kernel no longer takes the forward without gradients"
    plan = ak.explain(*leaves, window=(40, 40))
    assert plan.path == "blocked kernels" and plan.backward.startswith("attnkit's backward")


def test_fused_backward_on_strided_views_equals_the_formula() -> None:
    """The fused CPU flash kernels (forward with lse, backward) on transposed views (the
    last axis strided: the kernel gave wrong numbers there, found by the fuzzer) and on
    a window whose run and edges both take them: outputs and gradients of a window and
    of causal attention equal the float64 reference to 1e-12."""
    for kw in ({"window": (40, 10)}, {"is_causal": True}):
        g = torch.Generator().manual_seed(3)
        base = [torch.randn(1, 2, 16, 300, generator=g, dtype=torch.float64) for _ in "qkv"]
        leaves = [x.requires_grad_(True) for x in base]
        views = [x.transpose(-1, -2) for x in leaves]  # (1, 2, 300, 16), last axis strided
        out = ak.scaled_dot_product_attention(*views, **kw)
        got = torch.autograd.grad(out.square().sum(), leaves)
        ref = [x.detach().clone().requires_grad_(True) for x in base]
        want_out = ak.scaled_dot_product_attention(
            *(x.transpose(-1, -2) for x in ref), impl="reference", **kw
        )
        want = torch.autograd.grad(want_out.square().sum(), ref)
        err = float((out - want_out).abs().max())
        assert err <= 1e-12, f"{kw}: out {err:.2e} > 1e-12"
        for name, a, b in zip("qkv", got, want, strict=True):
            err = float((a - b).abs().max())
            assert err <= 1e-12, f"{kw}: grad {name}: {err:.2e} > 1e-12"
