"""``attnkit bench --backward``: its jobs time real forward+backward work whose gradients
are checked, its verdicts follow the measurements, and its CLI runs at tiny sizes."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from attnkit import backends
from attnkit.app.bench import backward, backward_report
from attnkit.app.bench.backward import AUTO, GradJob, GradResult
from attnkit.app.cli import main

INSTALLED = tuple(n for n in ("numpy", "torch", "jax") if backends.load(n).available())


@pytest.mark.parametrize("backend", INSTALLED)
def test_a_step_measures_checked_gradients(backend: str) -> None:
    job = GradJob(backend, AUTO, "window", 128, W=16, repeats=1)
    r = backward.measure(job)
    assert r.error is None, r.error
    assert r.seconds is not None and r.seconds > 0
    assert r.dq_error is not None and r.dq_error <= backward.TOLERANCE, r.dq_error


@pytest.mark.parametrize("what", ["call", "memory", "compile forward", "compile", "causal"])
def test_the_long_call_and_compile_jobs_measure(what: str) -> None:
    """The jobs of targets 4, 5 and 7 at tiny sizes: a jitted call (timed after its
    warm-up, with its peak memory), a step's memory, and jax.jit's compile seconds (of a
    window's step and forward, and of a causal step)."""
    if "jax" not in INSTALLED:
        pytest.skip("jax is not installed")
    kind, W = ("window", 16) if what.startswith("compile") else ("dense", None)
    if what == "causal":
        kind, what = "causal", "compile"
    r = backward.measure(GradJob("jax", AUTO, kind, 256, what, W=W, repeats=1))
    assert r.error is None, r.error
    assert r.seconds is not None and r.seconds > 0, r
    if not what.startswith("compile"):
        assert r.peak_rss_bytes is not None and r.peak_rss_bytes > 0, r


@pytest.mark.parametrize("wrong", ["dq", "dk", "dv", "nan"])
def test_wrong_gradients_are_refused(wrong: str) -> None:
    job = GradJob("numpy", AUTO, "dense", 64)
    arrays = backward._inputs(job)
    grads = list(backward._step(job, arrays)())
    i = {"dq": 0, "dk": 1, "dv": 2, "nan": 2}[wrong]
    grads[i] = grads[i] * 1.05 + (0.05 if wrong == "dk" else 0.0)
    if wrong == "nan":
        grads[i][0, 0, 0, 0] = float("nan")
    backward.check_gradients(job, arrays, backward._step(job, arrays)())  # the right ones pass
    with pytest.raises((ArithmeticError, FloatingPointError), match=r"wrong|not finite"):
        backward.check_gradients(job, arrays, grads)


def _result(backend: str, impl: str, kind: str, L: int, what: str, seconds: float, **kw: object):
    job = GradJob(backend, impl, kind, L, what, W=256 if kind == "window" else None)
    return GradResult(job, seconds=seconds, samples=[seconds], **kw)  # type: ignore[arg-type]


def test_verdicts_follow_the_measurements() -> None:
    s = backward.FULL
    results = [
        _result("torch", AUTO, "dense", 4096, "step", 0.9),
        _result("torch", backward.SDPA, "dense", 4096, "step", 1.0),
        _result("torch", AUTO, "window", 8192, "step", 0.35),
        _result("torch", AUTO, "window", 8192, "forward", 0.1),
        _result("torch", backward.SDPA_BAND, "window", 8192, "step", 4.0),
        _result("torch", AUTO, "dense", 32768, "memory", 60.0, peak_rss_bytes=3 * 2**30),
    ]
    lines = {v.line().split(" = ")[0]: v for v in backward_report.verdicts(results, s)}
    by = {k.split(": ", 1)[-1]: v for k, v in lines.items()}
    assert by["auto step / torch SDPA step"].status == "MET"
    assert by["auto step / torch SDPA step"].value == pytest.approx(0.9)
    assert by["auto step / SDPA band-mask step"].status == "NOT MET"  # 0.0875 > 0.05
    assert by["auto backward / forward"].value == pytest.approx(2.5)
    assert by["auto backward / forward"].status == "MET"
    assert lines["target 4  dense L=32768 torch: one step's peak memory, GiB"].status == "NOT MET"
    skipped = [v for v in lines.values() if v.status == "SKIPPED"]
    assert skipped and all("not measured" in v.detail for v in skipped)
    # attnkit failing is NOT MET, a failing baseline only SKIPPED
    broken = [replace(results[0], seconds=None, error="boom"), results[1]]
    v = backward_report.verdicts(broken, s)[0]
    assert v.status == "NOT MET" and "boom" in v.detail
    broken = [results[0], replace(results[1], seconds=None, error="boom")]
    assert backward_report.verdicts(broken, s)[0].status == "SKIPPED"
    quick = backward_report.verdicts(results, s, judged=False)
    assert {v.status for v in quick} <= {"QUICK", "SKIPPED"}


def test_jobs_cover_every_target() -> None:
    jobs = backward.jobs(backward.FULL, ("numpy", "torch", "jax"))
    done = [
        r
        for r in (
            _result(j.backend, j.impl, j.kind, j.L, j.what, 1.0, peak_rss_bytes=1) for j in jobs
        )
    ]
    assert len({j.describe() for j in jobs}) == len(jobs), "a job twice"
    assert not [v.line() for v in backward_report.verdicts(done) if v.status == "SKIPPED"]


def test_cli_runs_numpy_at_tiny_sizes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    report = tmp_path / "backward.json"
    argv = ["bench", "--backward", "--quick", "--backend", "numpy", "--repeats", "1"]
    assert main([*argv, "--json", str(report)]) == 0
    out = capsys.readouterr().out
    assert "target 3  window 32 numpy: step L=1024 / step L=512 = " in out
    assert "target 6" in out and "SKIPPED" in out  # its jax.nn side not selected
    data = json.loads(report.read_text())
    assert {r["job"]["backend"] for r in data["results"]} == {"numpy"}
    assert all(r["error"] is None and r["dq_error"] is not None for r in data["results"])


def test_cli_refuses_options_it_does_not_use(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["bench", "--backward", "--lengths", "64"])
    assert "--backward runs its own fixed cases; drop --lengths" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # each job is one process, measured once: no rounds
        main(["bench", "--backward", "--rounds", "3", "--tuned-env"])
    assert "drop --rounds, --tuned-env" in capsys.readouterr().err
