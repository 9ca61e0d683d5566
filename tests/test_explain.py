"""``attnkit.explain`` and ``attnkit explain``: the plan of a call, without computing it."""

from __future__ import annotations

import numpy as np
import pytest

import attnkit as ak
from attnkit import masks
from attnkit.app.cli import main


@pytest.fixture(autouse=True)
def no_attention(monkeypatch: pytest.MonkeyPatch) -> None:
    """explain must not compute attention."""

    def reached(*args, **kwargs):
        raise AssertionError("explain computed attention")

    monkeypatch.setattr("attnkit._dispatch.attend", reached)


def _np(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype("float32")


def test_numpy_dense_runs_the_blocked_kernels() -> None:
    q = _np(1, 2, 300, 16)
    plan = ak.explain(q, q, q)
    assert plan.path == "blocked kernels" and plan.backend == "numpy"
    assert plan.kernel.endswith("kernel.block_attention")
    assert any("no whole-call kernel" in d for d in plan.declined)
    assert plan.pairs_attended == plan.full_pairs == 2 * 300 * 300
    assert plan.blocks == -(-300 // plan.block_size)
    assert "path      blocked kernels" in str(plan)


@pytest.mark.parametrize(
    ("kwargs", "mask"),
    [
        ({"is_causal": True}, masks.causal()),
        ({"window": (5, 2)}, masks.sliding_window((5, 2))),
        ({"attn_mask": masks.documents([100, 57])}, masks.documents([100, 57])),
        ({"is_causal": True, "causal_alignment": "bottom_right"}, masks.causal("bottom_right")),
    ],
)
def test_pairs_attended_are_the_masks(kwargs: dict, mask) -> None:
    q = _np(2, 157, 8)
    for impl in ("auto", "generic", "reference"):
        plan = ak.explain(q, q, q, impl=impl, **kwargs)
        allowed = int(np.count_nonzero(mask.materialize(np, 157, 157)))
        assert plan.pairs_attended == 2 * allowed, (impl, plan)
        assert plan.pairs_attended <= plan.pairs_computed <= plan.full_pairs
    assert ak.explain(q, q, q, impl="generic", **kwargs).path == "generic"
    assert ak.explain(q, q, q, impl="reference", **kwargs).path == "reference"


def test_a_window_visits_keys_linear_in_L() -> None:
    short, long_ = _np(1, 1, 1024, 8), _np(1, 1, 2048, 8)
    a = ak.explain(short, short, short, window=(64, 64))
    b = ak.explain(long_, long_, long_, window=(64, 64))
    assert 1.8 <= b.pairs_computed / a.pairs_computed <= 2.2
    assert b.pairs_computed < b.full_pairs / 5


def test_torch_paths_and_reasons() -> None:
    torch = pytest.importorskip("torch")
    q = torch.randn(1, 8, 512, 64)
    plain = ak.explain(q, q, q)
    assert plain.path == "kernel" and plain.kernel.endswith("kernels.attention")
    window = ak.explain(q, q, q, window=(64, 64))
    assert window.path == "blocked kernels" and window.run_blocks > 0
    assert any("window or structured mask" in d for d in window.declined)
    weights = ak.explain(q, q, q, return_weights=True)
    assert weights.path == "generic"
    assert any("weights or lse" in d for d in weights.declined)
    assert weights.peak_bytes >= weights.full_pairs * 4
    low = ak.explain(*(x.half().requires_grad_() for x in (q, q, q)), is_causal=True)
    assert any("16-bit gradients" in d for d in low.declined)


def test_a_structure_allowing_every_pair_takes_the_whole_call_kernel() -> None:
    """A decoding step's bottom-right causal row, or a window wider than the keys, leaves
    no pair out: PyTorch's whole-call kernel runs it (and gives the executor's numbers)."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng()
    S = int(rng.integers(300, 700))
    q, k, v = (torch.randn(2, 4, n, 32, dtype=torch.float64) for n in (1, S, S))
    for kwargs in (
        {"is_causal": True, "causal_alignment": "bottom_right"},
        {"window": (S, 0), "causal_alignment": "bottom_right"},
        {"window": (None, None)},
    ):
        assert ak.explain(q, k, v, **kwargs).path == "kernel", kwargs
    assert ak.explain(q, k, v, window=(S // 2, 0), causal_alignment="bottom_right").path != "kernel"
    prefill = torch.randn(2, 4, 3, 32, dtype=torch.float64)  # its first rows see fewer keys
    plan = ak.explain(prefill, k, v, is_causal=True, causal_alignment="bottom_right")
    assert plan.path != "kernel"


def test_bad_input_raises_the_same_error() -> None:
    q = _np(1, 4, 8)
    with pytest.raises(ak.ShapeError, match="key has 9 features"):
        ak.explain(q, _np(1, 4, 9), _np(1, 4, 9))
    with pytest.raises(ak.ParameterError, match="return_weights"):
        ak.explain(q, q, q, return_weights="yes")


def test_cli_explain(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", "--L", "512", "--window", "64", "--backend", "numpy"]) == 0
    out = capsys.readouterr().out
    assert "L=512" in out and "path      blocked kernels" in out and "pairs" in out
    with pytest.raises(SystemExit) as exit_info:
        main(["explain", "--L", "-3"])
    assert exit_info.value.code != 0
    assert "non-negative integer" in capsys.readouterr().err
