"""attnkit.testing on attention functions written outside attnkit's code paths.

Three plain NumPy attentions, written here from the textbook formula: one right, one
following JAX's convention for rows with no allowed key (the mean of the values), one
with its window's left bound off by one. The kit must pass the first, name the
convention of the second and the window bug of the third. Then what the kit does with
bad functions (item 5 of the issue: a report line, never a crash) and with bad arguments
(an attnkit error naming the argument and the fix), and ``assert_attention_close``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from attnkit.errors import ArgumentTypeError, ParameterError
from attnkit.testing import (
    AttentionCheckError,
    AttentionMismatch,
    assert_attention_close,
    check_attention,
    declare,
)
from attnkit.testing import oracle as ref


def textbook(
    query,
    key,
    value,
    attn_mask=None,
    is_causal=False,
    scale=None,
    window=None,
    *,
    masked=-np.inf,
    left_short=0,
):
    """softmax(q k^T * scale + mask) v from the textbook: True = may attend, -inf additive,
    causal top-left, window (left, right) inclusive. ``masked=-1e30`` (JAX's large negative
    number) and ``left_short=1`` plant the two deliberate differences."""
    s = query @ np.swapaxes(key, -1, -2) * (query.shape[-1] ** -0.5 if scale is None else scale)
    i, j = np.indices(s.shape[-2:])  # query i, key j
    ok = (j <= i) | (not is_causal)
    if window is not None:
        left, right = (window, window) if isinstance(window, int) else window
        ok = ok & ((j >= i - left + left_short) if left is not None else True)
        ok = ok & ((j <= i + right) if right is not None else True)
    if attn_mask is not None and attn_mask.dtype == bool:
        ok = ok & attn_mask
    elif attn_mask is not None:
        s, ok = s + attn_mask, ok & (attn_mask > -np.inf)
    ok = np.broadcast_to(ok, s.shape)
    s = np.where(ok, s, masked)
    m = np.max(s, axis=-1, keepdims=True, initial=-np.inf)
    w = np.exp(s - np.where(np.isfinite(m), m, 0.0))
    w = w / np.where(w.sum(-1, keepdims=True) > 0, w.sum(-1, keepdims=True), 1.0)
    keep = (ok | (masked > -np.inf))[..., None]  # masked keys' terms: exactly nothing
    return np.where(keep, w[..., None] * value[..., None, :, :], 0.0).sum(-2).astype(query.dtype)


SUPPORTS = {"attn_mask", "is_causal", "scale", "window"}


def _quiet(fn: Any, **options: Any) -> Any:
    return check_attention(fn, raise_on_failure=False, **options)


def test_a_right_textbook_attention_passes() -> None:
    report = _quiet(textbook, supports=SUPPORTS, examples=15)
    assert report.ok, str(report)
    assert len(report.passed) >= 30 and not report.differing
    text = str(report)
    assert ": ok" in text.splitlines()[0]
    assert "needs enable_gqa, which the function does not support" in text  # skipped, why


def test_the_jax_convention_for_empty_rows_is_named() -> None:
    def jax_like(query, key, value, **kwargs):
        return textbook(query, key, value, masked=-1e30, **kwargs)

    report = _quiet(jax_like, supports=SUPPORTS, examples=0)
    assert not report.ok
    text = str(report)
    assert (
        "rows with no allowed key give the mean of the values (uniform weights): the "
        "convention of jax.nn.dot_product_attention" in text
    ), text
    # and, as JAX's large negative number does, the mean for additive rows too, and NaN
    # in masked values multiplied by their weight 0
    assert report.conventions() == {
        "empty_rows": "mean",
        "empty_rows_additive": "mean",
        "masked_value_nonfinite": "leaks",
    }
    differing = {r.case for r in report.differing}
    assert "mask_bool_empty_rows" in differing and "basic" not in differing
    assert report.found()["empty_rows=mean"] == ["mask_bool_empty_rows"]  # what shows it
    # held to the conventions it follows, the same function passes
    held = _quiet(jax_like, supports=SUPPORTS, examples=10, conventions=report.conventions())
    assert held.ok, str(held)
    assert "held to the declared conventions: empty_rows='mean'" in str(held)


def test_an_off_by_one_window_bound_is_named() -> None:
    def off_by_one(query, key, value, **kwargs):
        return textbook(query, key, value, left_short=1, **kwargs)

    report = _quiet(off_by_one, supports=SUPPORTS, examples=0)
    assert not report.ok
    differing = {r.case: r for r in report.differing}
    assert {"window", "window_causal", "window_L_ne_S"} <= set(differing), report
    assert "basic" not in differing and "mask_bool" not in differing
    window = differing["window"]
    assert window.explanations and window.explanations[0][0].key == "window_bounds=exclusive_left"
    assert "the window's left side sees one key fewer" in str(report)
    assert "a total size as Hugging Face's sliding_window counts it" in str(report)
    # its measured error and the rows that differ: every row whose leftmost key it drops
    assert "> allowed" in "\n".join(window.lines) and "rows: (0, 0, 2)" in window.lines[0]


@pytest.mark.parametrize(
    ("convention", "variant", "fn"),
    [
        ("causal_alignment", "bottom_right", "bottom_right"),
        ("mask_polarity", "true_masks", "inverted"),
        ("default_scale", "one", "unscaled"),
    ],
)
def test_other_planted_conventions_are_detected(convention: str, variant: str, fn: str) -> None:
    def planted(query, key, value, attn_mask=None, is_causal=False, scale=None):
        if fn == "bottom_right" and is_causal:
            L, S = query.shape[-2], key.shape[-2]
            band = np.tri(L, S, S - L, dtype=bool)  # key j <= i + S - L
            if attn_mask is None or attn_mask.dtype == bool:
                attn_mask = band if attn_mask is None else attn_mask & band
            else:
                attn_mask = np.where(band, attn_mask, -np.inf)
            is_causal = False
        if fn == "inverted" and attn_mask is not None and attn_mask.dtype == bool:
            attn_mask = ~attn_mask
        if fn == "unscaled" and scale is None:
            scale = 1.0
        return textbook(query, key, value, attn_mask=attn_mask, is_causal=is_causal, scale=scale)

    report = _quiet(planted, examples=0)
    assert report.conventions().get(convention) == variant, report
    held = _quiet(planted, examples=0, conventions={convention: variant})
    assert held.ok, str(held)


# --- bad functions: a line of the report, never a crash of the kit ------------------------


def _first_lines(report: Any) -> list[str]:
    return [line for r in report.differing for line in r.lines]


@pytest.mark.parametrize(
    ("bad", "words"),
    [
        (lambda q, k, v: q[..., :1], "returned shape"),
        (lambda q, k, v: textbook(q, k, v).astype(np.float16), "returned float16 for float64"),
        (lambda q, k, v: {"out": textbook(q, k, v)}, "returned builtins.dict, not an array"),
        (lambda q, k, v: (textbook(q, k, v), None), "returned a tuple of 2"),
        (lambda q, k, v: 1 / 0, "raised ZeroDivisionError: division by zero"),
        (lambda q, k, v: textbook(q, k, v) * np.nan, "NaN where a number is expected"),
    ],
    ids=["shape", "dtype", "not an array", "tuple", "raises", "nan"],
)
def test_bad_functions_get_a_line(bad: Any, words: str) -> None:
    report = _quiet(bad, examples=2 if "NaN" in words else 0, dtypes=("float64",))
    assert not report.ok and report.differing
    assert any(words in line for line in _first_lines(report)), report
    assert words in str(report)


def test_a_function_that_writes_into_its_inputs() -> None:
    def scribbles(q, k, v):
        out = textbook(q, k, v)
        k[...] = 0.0
        return out

    report = _quiet(scribbles, examples=0, dtypes=("float32",))
    assert any("wrote into its input key" in line for line in _first_lines(report)), report


def test_another_library_and_device_are_named() -> None:
    torch = pytest.importorskip("torch")
    report = _quiet(
        lambda q, k, v: textbook(q.numpy(), k.numpy(), v.numpy()), library="torch", examples=0
    )
    assert any("for torch inputs" in line for line in _first_lines(report)), report
    report = _quiet(
        lambda q, k, v: torch.nn.functional.scaled_dot_product_attention(q, k, v).to("meta"),
        library="torch",
        examples=0,
        cases=["basic"],
    )
    assert any("returned an array on meta, inputs on cpu" in line for line in _first_lines(report))


def test_a_device_that_cannot_be_used() -> None:
    pytest.importorskip("torch")
    with pytest.raises(ParameterError, match=r"device='nodevice:3' cannot hold torch arrays"):
        check_attention(textbook, library="torch", device="nodevice:3")


def test_nothing_checked_is_not_ok() -> None:
    report = _quiet(textbook, cases=["window"], supports=set(), examples=0)
    assert not report.ok and "Nothing was checked" in str(report)


def test_not_a_function() -> None:
    report = _quiet(42)
    assert not report.ok and not report.results
    assert "fn is not callable: got int 42" in str(report)


def test_under_pytest_a_difference_fails_with_the_report() -> None:
    with pytest.raises(AttentionCheckError, match="DIFFERS") as info:
        check_attention(lambda q, k, v: q * 2, examples=0)
    assert not info.value.report.ok and isinstance(info.value, AssertionError)


def test_unexplained_differences_say_so() -> None:
    report = _quiet(lambda q, k, v: textbook(q, k, v) + 0.25, examples=0, dtypes=("float64",))
    assert "no known convention explains it" in str(report)


# --- bad arguments to the kit: attnkit errors naming the argument and the fix ------------


@pytest.mark.parametrize(
    ("options", "error", "words"),
    [
        ({"supports": {"windo"}}, ParameterError, "'windo', not keyword arguments"),
        ({"supports": "attn_mask"}, ArgumentTypeError, "supports must be a set"),
        ({"conventions": {"empty_row": "mean"}}, ParameterError, "unknown convention"),
        ({"conventions": {"empty_rows": "avg"}}, ParameterError, "choose one of 'zero'"),
        ({"library": "tensorflow"}, ParameterError, "library must be one of"),
        ({"dtypes": ("bfloat16",)}, ParameterError, "numpy checks can use"),
        ({"examples": -1}, ParameterError, "examples must be an int >= 0"),
        ({"gradients": True}, ParameterError, "gradients=True needs automatic"),
        ({"cases": ["nope"]}, ParameterError, "unknown case(s) 'nope'"),
    ],
)
def test_bad_arguments_raise(options: dict[str, Any], error: type, words: str) -> None:
    with pytest.raises(error, match=words.replace("(", r"\(").replace(")", r"\)")):
        check_attention(textbook, **options)


def test_without_hypothesis_the_fixed_cases_still_run(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "hypothesis" else real(name)
    )
    report = _quiet(textbook, supports=SUPPORTS)
    assert report.ok and 'pip install "attnkit[testing]"' in str(report)
    with pytest.raises(ParameterError, match=r"examples=5 needs hypothesis.*attnkit\[testing\]"):
        check_attention(textbook, examples=5)


def test_declare_gives_the_defaults() -> None:
    declared = declare(textbook, supports={"attn_mask"}, dtypes=("float32",), examples=0)
    report = _quiet(declared)
    assert report.ok and {r.dtype for r in report.results} == {"float32"}
    assert "mask_bool" in {r.case for r in report.passed}  # attn_mask: declared
    causal = next(r for r in report.skipped if r.case == "causal_square")
    assert causal.lines == ("needs is_causal, which the function does not support",)
    assert textbook.__name__ == declared.__name__
    with pytest.raises(ParameterError, match="declare got support, not options"):
        declare(textbook, support={"attn_mask"})


# --- assert_attention_close -----------------------------------------------------------


def _inputs(seed: int = 0) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(seed)
    return tuple(rng.standard_normal((2, 3, 6, 8)) for _ in range(3))


def test_assert_attention_close_passes_and_checks_weights_lse_and_gradients() -> None:
    q, k, v = _inputs()
    mask = np.random.default_rng(1).random((6, 6)) < 0.7
    gold = ref.attention(q, k, v, attn_mask=mask, is_causal=True)
    dout = np.random.default_rng(2).standard_normal(gold.out.shape)
    grads = ref.attention_grad(q, k, v, dout, attn_mask=mask, is_causal=True)
    assert_attention_close(
        gold.out,
        q,
        k,
        v,
        attn_mask=mask,
        is_causal=True,
        weights=gold.weights,
        lse=gold.lse,
        grads=grads,
        grad_out=dout,
    )
    with pytest.raises(AttentionMismatch, match=r"dkey: max error 1\.00e-06 > allowed"):
        bad = (grads[0], grads[1] + 1e-6, grads[2])
        assert_attention_close(
            gold.out, q, k, v, attn_mask=mask, is_causal=True, grads=bad, grad_out=dout
        )
    with pytest.raises(AttentionMismatch, match="weights: max error"):
        assert_attention_close(
            gold.out, q, k, v, attn_mask=mask, is_causal=True, weights=gold.weights * 1.01
        )


def test_assert_attention_close_names_rows_errors_and_the_convention() -> None:
    q, k, v = (x.astype(np.float32) for x in _inputs(3))
    out = textbook(q, k, v, is_causal=True).copy()
    out[1, 2, 4] += 1e-3  # one row off
    with pytest.raises(AttentionMismatch) as info:
        assert_attention_close(out, q, k, v, is_causal=True)
    message = str(info.value)
    assert "output: max error 1.00e-03 > allowed" in message
    assert "on 1 of 36 rows: (1, 2, 4)" in message and "float32" in message
    # the convention most likely behind a difference
    L, S = 4, 9
    q, k, v = (np.random.default_rng(4).standard_normal((1, 2, n, 8)) for n in (L, S, S))
    bottom_right = textbook(q, k, v, attn_mask=np.tri(L, S, S - L, dtype=bool))
    with pytest.raises(AttentionMismatch, match="causal masks are aligned bottom-right"):
        assert_attention_close(bottom_right, q, k, v, is_causal=True)
    assert_attention_close(
        bottom_right, q, k, v, is_causal=True, conventions={"causal_alignment": "bottom_right"}
    )
    assert_attention_close(bottom_right, q, k, v, is_causal=True, atol=10.0)  # atol replaces


def test_assert_attention_close_of_torch_and_jax_results() -> None:
    torch = pytest.importorskip("torch")
    q, k, v = (torch.from_numpy(x) for x in _inputs(5))
    out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert_attention_close(out, q, k, v, is_causal=True)
    jnp = pytest.importorskip("jax.numpy")
    qj, kj, vj = (jnp.asarray(x.numpy(), dtype=jnp.float32) for x in (q, k, v))
    assert_attention_close(out.float().numpy(), qj, kj, vj, is_causal=True)


def test_assert_attention_close_bad_arguments() -> None:
    q, k, v = _inputs()
    with pytest.raises(ParameterError, match="unknown keyword argument"):
        assert_attention_close(q, q, k, v, is_casual=True)
    with pytest.raises(AttentionMismatch, match=r"shape \(2, 3, 6, 4\), expected"):
        assert_attention_close(q[..., :4], q, k, v)
    with pytest.raises(ParameterError, match="grads= needs grad_out="):
        assert_attention_close(textbook(q, k, v), q, k, v, grads=(q, k, v))
