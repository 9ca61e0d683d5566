"""attnkit.viz: aggregation, attention rollout and the matplotlib pictures.

Rollout and aggregation are checked against an independent NumPy float64 implementation
(written here with explicit loops, from the paper's definition) on NumPy, PyTorch, JAX
(eager and jit) and array-api-strict arrays. Pictures are written as PNG, SVG and PDF and
decoded; the same weights from NumPy, PyTorch and JAX must give the same picture.
"""

from __future__ import annotations

import io
import itertools
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest
from _helpers import x64

import attnkit as ak
from attnkit import viz

plt_backend = pytest.importorskip("matplotlib", reason="the pictures need matplotlib")
PIL = pytest.importorskip("PIL.Image", reason="decoding PNG needs Pillow (a matplotlib dependency)")

N, H, L = 3, 4, 7


def softmax_weights(shape: tuple[int, ...], seed: int) -> np.ndarray:
    """Random attention weights: a softmax of standard normal scores, rows sum to 1."""
    scores = np.random.default_rng(seed).standard_normal(shape) * 2.0
    e = np.exp(scores - scores.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def rollout_loops(w: np.ndarray, residual: float, head: str) -> list[np.ndarray]:
    """Abnar & Zuidema (2020) by loops: w (N, H, L, L) -> [R_0, ..., R_(N-1)]."""
    n_layers, n_heads, length, _ = w.shape
    result, current = [], None
    for layer in range(n_layers):
        a = np.zeros((length, length))
        for i in range(length):
            for j in range(length):
                per_head = [w[layer, h, i, j] for h in range(n_heads)]
                combined = sum(per_head) / n_heads if head == "mean" else max(per_head)
                a[i, j] = (1 - residual) * combined + residual * (i == j)
            a[i] /= a[i].sum()
        current = a if current is None else a @ current
        result.append(current)
    return result


@pytest.mark.parametrize(("residual", "head"), [(0.5, "mean"), (0.3, "mean"), (0.5, "max")])
def test_rollout_matches_loops(residual: float, head: str) -> None:
    w = softmax_weights((N, H, L, L), seed=1)
    expected = rollout_loops(w, residual, head)
    got = viz.rollout(w, residual=residual, head=head)
    steps = viz.rollout(w, residual=residual, head=head, all_layers=True)
    assert got.shape == (L, L) and steps.shape == (N, L, L)
    err = np.max(np.abs(got - expected[-1]))
    assert err < 1e-13, f"rollout error {err:.2e} > 1e-13"
    err_steps = np.max(np.abs(steps - np.stack(expected)))
    assert err_steps < 1e-13, f"per-layer rollout error {err_steps:.2e} > 1e-13"
    assert np.allclose(got.sum(-1), 1.0, atol=1e-13)


def test_rollout_batch_and_layer_list() -> None:
    # Hugging Face gives a tuple of N layers (B, H, L, L); the batch is a leading axis.
    w = softmax_weights((N, 2, H, L, L), seed=2)  # (N, B, H, L, L)
    layers = [w[n] for n in range(N)]
    got = viz.rollout(layers)  # (B, L, L)
    assert got.shape == (2, L, L)
    for b in range(2):
        expected = rollout_loops(w[:, b], 0.5, "mean")[-1]
        assert np.max(np.abs(got[b] - expected)) < 1e-13


def test_rollout_empty_row_stays_zero() -> None:
    # residual 0 and a query that attended nothing: zero row, never NaN.
    w = softmax_weights((2, 2, 4, 4), seed=3)
    w[:, :, 1] = 0.0
    got = viz.rollout(w, residual=0.0)
    assert not np.isnan(got).any()
    assert np.all(got[1] == 0.0)


def test_aggregate_against_numpy() -> None:
    w = softmax_weights((N, H, L, 5), seed=4)
    cases = [
        ("heads", "mean", w.mean(axis=1)),
        ("heads", "max", w.max(axis=1)),
        ("layers", "mean", w.mean(axis=0)),
        ("layers", "max", w.max(axis=0)),
        ("all", "mean", w.mean(axis=(0, 1))),
        ("all", "max", w.max(axis=(0, 1))),
    ]
    for over, how, expected in cases:
        got = viz.aggregate(w, over=over, how=how)
        assert got.shape == expected.shape, (over, how, got.shape)
        assert np.max(np.abs(got - expected)) < 1e-15, (over, how)
    assert np.allclose(viz.aggregate(w[0]).sum(-1), 1.0)  # the mean of rows keeps sums


def _backends() -> list[str]:
    return ["numpy", "torch", "jax", "jax-jit", "strict"]


@pytest.mark.parametrize("backend", _backends())
def test_rollout_and_aggregate_on_every_backend(backend: str) -> None:
    w64 = softmax_weights((N, H, L, L), seed=5)
    expected = rollout_loops(w64, 0.5, "mean")[-1]
    name = backend.split("-")[0]
    pytest.importorskip({"strict": "array_api_strict"}.get(name, name))
    adapter = ak.backends.load(name)
    with x64(pytest.importorskip("jax")) if name == "jax" else _nothing():
        w = adapter.from_numpy(w64, "float64")
        fn = viz.rollout
        if backend == "jax-jit":
            import jax

            fn = jax.jit(viz.rollout)
        got = fn(w)
        assert type(got) is type(w), f"{backend}: returned {type(got)}, not {type(w)}"
        err = np.max(np.abs(adapter.to_numpy(got) - expected))
        assert err < 1e-12, f"{backend}: rollout error {err:.2e} > 1e-12"
        mean = adapter.to_numpy(viz.aggregate(w, "all", "max"))
        assert np.max(np.abs(mean - w64.max(axis=(0, 1)))) < 1e-15


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def test_rollout_low_precision_in_float32() -> None:
    torch = pytest.importorskip("torch")
    w = torch.from_numpy(softmax_weights((N, H, L, L), seed=6)).to(torch.bfloat16)
    got = viz.rollout(w)
    assert got.dtype == torch.float32
    assert torch.allclose(got.sum(-1), torch.ones(L), atol=1e-5)


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda w: viz.aggregate(w, over="tokens"), ak.ParameterError, "over must be one of"),
        (lambda w: viz.aggregate(w, how="median"), ak.ParameterError, "how must be one of"),
        (lambda w: viz.aggregate(w[0, 0], "heads"), ak.ShapeError, r"\(\.\.\., H, L, S\)"),
        (lambda w: viz.aggregate(w[0], "layers"), ak.ShapeError, "N, H, L, S"),
        (lambda w: viz.aggregate([1, 2]), ak.ArgumentTypeError, "must be an array"),
        (lambda w: viz.aggregate(w.astype(int)), ak.DTypeError, "floating-point"),
        (lambda w: viz.rollout(w[..., :5]), ak.ShapeError, "self-attention"),
        (lambda w: viz.rollout(w[0]), ak.ShapeError, "self-attention"),
        (lambda w: viz.rollout(w, residual=1.5), ak.ParameterError, r"\[0, 1\]"),
        (lambda w: viz.rollout(w, head="min"), ak.ParameterError, "head must be one of"),
        (lambda w: viz.rollout([w[0], w[1, :2]]), ak.ShapeError, "same"),
        (lambda w: viz.rollout([]), ak.ShapeError, "empty"),
        (lambda w: viz.heatmap(w[0], ["a"] * L), ak.ShapeError, "aggregate"),
        (lambda w: viz.heatmap(w[0, 0], ["a"] * 3), ak.ShapeError, "3 entries"),
        (lambda w: viz.head_grid(w[0], columns=0), ak.ParameterError, "columns"),
    ],
)
def test_bad_input_raises(call, error, match) -> None:  # type: ignore[no-untyped-def]
    w = softmax_weights((N, H, L, L), seed=7)
    with pytest.raises(error, match=match):
        call(w)


def test_mixed_libraries_in_a_layer_list() -> None:
    torch = pytest.importorskip("torch")
    w = softmax_weights((2, H, L, L), seed=8)
    with pytest.raises(ak.NamespaceMismatchError, match=r"weights\[1\]"):
        viz.rollout([w[0], torch.from_numpy(w[1])])


# ---- pictures --------------------------------------------------------------------------

TOKENS = ["[CLS]", "the", "cat", "sat", "on", "mats", "[SEP]"]


def _pictures(w: np.ndarray) -> dict[str, object]:
    return {
        "heatmap": viz.heatmap(w[0, 1], TOKENS, title="one head"),
        "head_grid": viz.head_grid(w[0], TOKENS),
        "overview": viz.overview(w, TOKENS),
        "rollout": viz.heatmap(viz.rollout(w), TOKENS, title="rollout"),
    }


@pytest.mark.parametrize("fmt", ["png", "svg", "pdf"])
def test_pictures_written_in_each_format(tmp_path: Path, fmt: str) -> None:
    w = softmax_weights((N, H, L, L), seed=9)
    for name, fig in _pictures(w).items():
        path = viz.save(fig, tmp_path / f"{name}.{fmt}", dpi=50)
        data = path.read_bytes()
        assert len(data) > 2000, f"{name}.{fmt} is only {len(data)} bytes"
        if fmt == "png":
            image = PIL.open(io.BytesIO(data))
            width, height = fig.get_size_inches() * 50
            assert abs(image.size[0] - width) <= 1 and abs(image.size[1] - height) <= 1, (
                name,
                image.size,
            )
            pixels = np.asarray(image.convert("L"))
            assert pixels.std() > 10, f"{name}.png looks blank (std {pixels.std():.1f})"
        elif fmt == "svg":
            root = ET.fromstring(data)
            assert root.tag.endswith("svg")
            assert len(list(root.iter())) > 50, f"{name}.svg has almost no elements"
        else:
            assert data.startswith(b"%PDF-") and data.rstrip().endswith(b"%%EOF")


def test_picture_shows_the_weights_and_tokens() -> None:
    w = softmax_weights((N, H, L, L), seed=10)
    fig = viz.heatmap(w[2, 3], TOKENS)
    ax = fig.axes[0]
    assert np.array_equal(ax.images[0].get_array(), w[2, 3])
    assert [t.get_text() for t in ax.get_xticklabels()] == TOKENS
    grid = viz.overview(w, TOKENS)
    images = [a.images[0].get_array() for a in grid.axes if a.images]
    assert len(images) == N * H
    assert np.array_equal(images[H + 2], w[1, 2])  # row = layer, column = head


def _rgba(fig) -> np.ndarray:  # type: ignore[no-untyped-def]
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    return np.asarray(canvas.buffer_rgba()).copy()


def test_same_picture_from_numpy_torch_and_jax() -> None:
    torch = pytest.importorskip("torch")
    jnp = pytest.importorskip("jax.numpy")
    w = softmax_weights((N, H, L, L), seed=11).astype(np.float32)
    inputs = {
        "numpy": w,
        "torch": torch.from_numpy(w).requires_grad_(True),  # grad-tracking tensors work too
        "jax": jnp.asarray(w),
    }
    data, pixels = {}, {}
    for name, x in inputs.items():
        figs = [
            viz.heatmap(x[0, 1], TOKENS),
            viz.head_grid(x[1], TOKENS),
            viz.heatmap(viz.rollout(x), TOKENS),
        ]
        data[name] = [np.asarray(a.images[0].get_array()) for f in figs for a in f.axes if a.images]
        pixels[name] = [_rgba(f) for f in figs]
    for name in ("torch", "jax"):
        for ours, theirs in zip(data["numpy"], data[name], strict=True):
            assert np.max(np.abs(ours - theirs)) < 1e-6, name
        for ours, theirs in zip(pixels["numpy"], pixels[name], strict=True):
            assert np.array_equal(ours, theirs), f"{name} draws a different picture"


def test_save_refuses_wrong_kinds(tmp_path: Path) -> None:
    w = softmax_weights((1, 2, 4, 4), seed=12)
    fig = viz.heatmap(w[0, 0])
    with pytest.raises(ak.ParameterError, match=r"\.png, \.svg, \.pdf or \.html"):
        viz.save(fig, tmp_path / "x.gif")
    with pytest.raises(ak.ParameterError, match="AttentionView"):
        viz.save(fig, tmp_path / "x.html")
    with pytest.raises(ak.ArgumentTypeError, match="matplotlib Figure"):
        viz.save(viz.AttentionView(w), tmp_path / "x.png")
    assert not list(tmp_path.iterdir())


def test_pictures_use_no_pyplot_state() -> None:
    import matplotlib.pyplot as plt

    before = plt.get_fignums()
    viz.overview(softmax_weights((2, 2, 5, 5), seed=13))
    assert plt.get_fignums() == before


# ---- figures fit for a paper (issue 18): checked by structure, not by pixels ------------


def _colorbars(fig) -> list:  # type: ignore[no-untyped-def]
    return [ax for ax in fig.axes if ax.get_label() == "<colorbar>"]


def _texts(fig) -> list[str]:  # type: ignore[no-untyped-def]
    from matplotlib.text import Text

    return [t.get_text() for t in fig.findobj(Text) if t.get_text()]


def _panels(fig) -> list:  # type: ignore[no-untyped-def]
    return [ax for ax in fig.axes if ax.images]


def _tick_texts(ax, axis: str) -> list[str]:  # type: ignore[no-untyped-def]
    labels = ax.get_xticklabels() if axis == "x" else ax.get_yticklabels()
    return [t.get_text() for t in labels]


FIGURES = {
    "heatmap": lambda w, **kw: viz.heatmap(w[0, 1], TOKENS, **kw),
    "rollout": lambda w, **kw: viz.heatmap(
        viz.rollout(w), TOKENS, colorbar_label="rollout share", **kw
    ),
    "head_grid": lambda w, **kw: viz.head_grid(w[0], TOKENS, **kw),
    "overview": lambda w, **kw: viz.overview(w, TOKENS, **kw),
}


@pytest.mark.parametrize("color_scale", ["linear", "sqrt"])
@pytest.mark.parametrize("name", list(FIGURES))
def test_every_figure_has_one_labelled_colour_bar(name: str, color_scale: str) -> None:
    w = softmax_weights((N, H, L, L), seed=20)
    fig = FIGURES[name](w, color_scale=color_scale)
    bars = _colorbars(fig)
    assert len(bars) == 1, f"{name}: {len(bars)} colour bars"
    label = bars[0].get_ylabel()
    assert label, f"{name}: the colour bar has no label"
    assert ("square-root" in label) == (color_scale == "sqrt"), label
    assert len(_panels(fig)) == {"heatmap": 1, "rollout": 1, "head_grid": H}.get(name, N * H)


@pytest.mark.parametrize("figure", [viz.head_grid, viz.overview])
def test_grids_state_their_scale(figure) -> None:  # type: ignore[no-untyped-def]
    w = softmax_weights((N, H, L, L), seed=21)
    x = w[0] if figure is viz.head_grid else w  # (H, L, L) or (N, H, L, L)
    panel = figure(x, TOKENS)  # default: scale="panel", as BertViz
    assert _colorbars(panel)[0].get_ylabel() == "weight / the panel's maximum"
    assert any("each panel is scaled to its own maximum" in t for t in _texts(panel))
    assert _colorbars(panel)[0].get_ylim() == (0.0, 1.0)
    for ax in _panels(panel):  # each panel runs from 0 to its own maximum
        image = ax.images[0]
        assert image.norm.vmin == 0.0 and image.norm.vmax == image.get_array().max()
    shared = figure(x, TOKENS, scale="shared")
    top = float(x.max())
    assert _colorbars(shared)[0].get_ylabel() == "attention weight (one scale for all panels)"
    assert any("one colour scale for all panels" in t for t in _texts(shared))
    assert not any("own maximum" in t for t in _texts(shared))
    assert _colorbars(shared)[0].get_ylim() == pytest.approx((0.0, top))
    for ax in _panels(shared):
        assert ax.images[0].norm.vmax == pytest.approx(top)


def test_sqrt_colour_bar_ticks_are_weights() -> None:
    w = softmax_weights((N, H, L, L), seed=22)
    fig = viz.heatmap(w[1, 2], TOKENS, color_scale="sqrt")
    top = float(w[1, 2].max())
    ticks = _colorbars(fig)[0].get_yticks()
    assert ticks[0] == 0.0 and ticks[-1] == pytest.approx(top)
    assert ticks[1] == pytest.approx(0.01 * top)  # a weak weight gets its own tick
    grid = viz.overview(w, TOKENS, color_scale="sqrt", scale="shared")
    assert _colorbars(grid)[0].get_yticks()[-1] == pytest.approx(float(w.max()))


def test_overview_token_labels_where_they_fit() -> None:
    w = softmax_weights((N, H, L, L), seed=23)
    fig = viz.overview(w, TOKENS)
    panels = np.array(_panels(fig)).reshape(N, H)  # rows = layers, columns = heads
    for n in range(N):
        for h in range(H):
            ys, xs = _tick_texts(panels[n, h], "y"), _tick_texts(panels[n, h], "x")
            assert ys == (TOKENS if h == 0 else []), (n, h, ys)
            assert xs == (TOKENS if n == N - 1 else []), (n, h, xs)
    assert not any("omitted" in t for t in _texts(fig))


def test_overview_says_when_token_labels_do_not_fit() -> None:
    w = softmax_weights((2, 12, 40, 40), seed=24)
    fig = viz.overview(w, [f"tok{i}" for i in range(40)])
    assert all(not _tick_texts(ax, "x") and not _tick_texts(ax, "y") for ax in _panels(fig))
    note = "token labels omitted: 40 tokens do not fit in a panel; draw one head with viz.heatmap"
    assert any(note in t for t in _texts(fig)), _texts(fig)
    grid = viz.head_grid(w[0], [f"tok{i}" for i in range(40)], columns=12)
    assert any("token labels omitted: 40 tokens" in t for t in _texts(grid))


@pytest.fixture(scope="module")
def overview_12x12():  # type: ignore[no-untyped-def]
    tokens = ["[CLS]", "the", "cat", "sat", "on", "the", "mat", "[SEP]"]
    fig = viz.overview(softmax_weights((12, 12, 8, 8), seed=25), tokens)
    _rgba(fig)  # lay it out and draw it, so text positions are final
    return fig, tokens


def test_overview_is_readable_at_12_by_12(overview_12x12) -> None:  # type: ignore[no-untyped-def]
    from matplotlib.text import Text

    fig, tokens = overview_12x12
    width, height = fig.get_size_inches()
    assert width <= 14.0 and height <= 14.0, (width, height)
    renderer = fig.canvas.get_renderer()
    shown = [t for t in fig.findobj(Text) if t.get_text() and t.get_visible()]
    small = sorted({t.get_fontsize() for t in shown if t.get_fontsize() < 6.0})
    assert not small, f"text below 6 pt at print size: {small}"
    panels = np.array(_panels(fig)).reshape(12, 12)
    assert _tick_texts(panels[0, 0], "y") == tokens
    assert _tick_texts(panels[11, 5], "x") == tokens

    def disjoint(texts) -> None:  # type: ignore[no-untyped-def]
        boxes = [t.get_window_extent(renderer) for t in texts]
        for a, b in itertools.pairwise(boxes):
            assert not a.overlaps(b), f"overlapping text: {a} and {b}"

    disjoint([ax.title for ax in panels[0]])  # head titles
    disjoint([ax.yaxis.label for ax in panels[:, 0]])  # layer labels
    disjoint(panels[0, 0].get_yticklabels())  # query tokens
    disjoint(panels[11, 0].get_xticklabels())  # key tokens
    title_box = fig._suptitle.get_window_extent(renderer)
    assert not any(title_box.overlaps(ax.title.get_window_extent(renderer)) for ax in panels[0])


def test_saved_figures_keep_their_labels(tmp_path: Path) -> None:
    w = softmax_weights((N, H, L, L), seed=26)
    fig = viz.overview(w, TOKENS)
    for fmt in ("png", "svg", "pdf"):
        assert viz.save(fig, tmp_path / f"overview.{fmt}", dpi=60).stat().st_size > 2000
    text = "".join(ET.parse(tmp_path / "overview.svg").getroot().itertext())
    for expected in ["weight / the panel's maximum", "each panel is scaled to its own", "[CLS]"]:
        assert expected in text, f"{expected!r} is not in the SVG's text"


def test_bad_figure_options_raise() -> None:
    w = softmax_weights((N, H, L, L), seed=27)
    with pytest.raises(ak.ParameterError, match="scale must be one of"):
        viz.overview(w, scale="global")
    with pytest.raises(ak.ParameterError, match="scale must be one of"):
        viz.head_grid(w[0], scale=1)
    with pytest.raises(ak.ArgumentTypeError, match="colorbar_label must be a str"):
        viz.heatmap(w[0, 0], colorbar_label=3)
