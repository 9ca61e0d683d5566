"""``attnkit bench --forms``: the jobs it runs and its verdict lines (the loop issue's
targets), from synthetic measurements; one real JAX job at a tiny size."""

from __future__ import annotations

import pytest

from attnkit.app import cli
from attnkit.app.bench import forms

SIZES = forms.QUICK


def _result(what: str, form: str, L: int, seconds: float, impl: str = "attnkit", **kw):
    job = forms.FormJob(what, form, L, impl, W=SIZES.W)
    return forms.FormResult(job, [seconds], **kw)


def test_jobs_cover_every_target() -> None:
    jobs = forms.jobs(SIZES, ("jax", "torch"))
    whats = {(j.what, j.form) for j in jobs}
    for form in forms.COMPILED_FORMS:
        assert ("compile", form) in whats
    assert ("call", "dense") in whats and ("torch window", "window") in whats
    assert {j.impl for j in jobs if j.what == "forward"} >= {
        "attnkit", "jax.nn.dot_product_attention", "tokamax xla_chunked"}  # fmt: skip
    assert not [j for j in forms.jobs(SIZES, ("jax",)) if j.what.startswith("torch")]


def test_verdict_lines_follow_the_measurements() -> None:
    small, large = SIZES.compile
    results = [_result("compile", f, L, 1.0 if L == small else 1.1) for f in forms.COMPILED_FORMS
               for L in (small, large)]  # fmt: skip
    results += [
        _result("forward", f, SIZES.timed, 1.0) for f in ("padded causal", "softcap causal")
    ]
    results += [_result("forward", f, SIZES.timed, 2.0, impl) for f, impl in forms.TIMED]
    d_small, d_large = SIZES.dense
    results += [_result("call", "dense", d_small, 1.0), _result("call", "dense", d_large, 70.0)]
    results += [_result("torch window", "window", SIZES.window[1], 1.2, eager=[1.0])]
    lines = forms.verdicts(results, SIZES, judged=True)
    text = "\n".join(lines)
    assert f"compile L={large} / L={small} = 1.100  (bound <= 1.2)  MET" in text, text
    assert "attnkit / tokamax xla_chunked = 0.500  (bound <= 1)  MET" in text, text
    scale = (d_large / d_small) ** 2
    assert f"({scale:g} x L={d_small}) = {70 / scale:.3f}" in text, text
    assert "torch.compile window 32 L=512 / eager = 1.200  (bound <= 1)  NOT MET" in text, text
    assert "first call L=512, s: SKIPPED (not measured)" in text, text


def test_a_peer_that_failed_is_skipped_with_its_reason() -> None:
    failed = forms.FormResult(
        forms.FormJob("forward", "padded causal", SIZES.timed, "tokamax xla_chunked"),
        error="ModuleNotFoundError: No module named 'tokamax'",
    )
    ours = _result("forward", "padded causal", SIZES.timed, 1.0)
    lines = forms.verdicts([ours, failed], SIZES, judged=True)
    assert any("SKIPPED (ModuleNotFoundError" in line for line in lines), lines


def test_one_compile_job_runs() -> None:
    pytest.importorskip("jax")
    r = forms.measure(forms.FormJob("compile", "segments causal", 64, repeats=1))
    assert r.error is None and len(r.samples) == 3 and all(s > 0 for s in r.samples), r


def test_cli_refuses_options_that_do_not_apply(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        cli.main(["bench", "--forms", "--lengths", "256"])
    assert info.value.code == 2
    assert "drop --lengths" in capsys.readouterr().err
