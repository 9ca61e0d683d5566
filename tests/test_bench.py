"""``attnkit bench``: smoke runs at tiny sizes, its report, and its refusals.

Benchmarks print ratios; tests only check that the benchmark runs, times real work (each
result is checked against float64 inside the bench) and reports what it measured.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from attnkit import backends
from attnkit.app.bench.cases import (
    ATTNKIT_IMPLS,
    Case,
    Job,
    Measurement,
    baselines_for,
    bench_tools,
)
from attnkit.app.bench.measure import measure
from attnkit.app.bench.settings import Settings, plan
from attnkit.app.bench.targets import TARGET_SIZES, checks, evaluate
from attnkit.app.bench.worker import run_job
from attnkit.app.cli import main

INSTALLED = [n for n in backends.NAMES if backends.load(n).available()]
TINY = ["--quick", "--repeats", "1", "--isolate", "none", "--plain"]


def test_quick_numpy_json_and_plot(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("matplotlib")
    report, png = tmp_path / "bench.json", tmp_path / "bench.png"
    argv = ["bench", "--quick", "--backend", "numpy", "--repeats", "1", "--plain"]
    assert main([*argv, "--json", str(report), "--plot", str(png)]) == 0
    out = capsys.readouterr().out
    assert "Smoke run at tiny sizes: no target is judged and no ratio is printed" in out
    assert not re.search(r"^target \d", out, re.M) and "MET" not in out, "no verdict at smoke sizes"
    assert "default environment (no allocator tuning)" in out

    data = json.loads(report.read_text())
    assert set(data) == {"attnkit", "machine", "settings", "measurements", "targets"}
    assert data["machine"]["cores"] >= 1 and "numpy" in data["machine"]["versions"]
    got = {(m["case_label"], m["job"]["impl"]) for m in data["measurements"]}
    for label in ("dense L=256", "dense L=512", "decode L=1 S=256"):
        assert {
            (label, "attnkit auto"),
            (label, "attnkit generic"),
            (label, "numpy textbook"),
        } <= got
    assert ("window 32 L=1024", "attnkit auto") in got
    for m in data["measurements"]:
        assert m["error"] is None, m
        assert m["seconds"] > 0 and len(m["samples"]) >= 1, m
        assert m["max_error"] < 1e-4, m  # the bench checked the timed result itself
    memory = [m for m in data["measurements"] if m["job"]["case"]["kind"] == "memory"]
    assert len(memory) == 1 and memory[0]["isolated"]  # --quick isolates the memory case
    assert memory[0]["peak_rss_bytes"] >= memory[0]["base_rss_bytes"] > 0
    numbers = {t["target"] for t in data["targets"]}
    assert numbers == set(range(1, 9))
    t2 = next(t for t in data["targets"] if t["target"] == 2)
    assert t2["status"] == "QUICK" and t2["value"] > 0  # in the JSON, for machines only
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_quick_every_installed_backend(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["bench", *TINY, "--lengths", "64", "--window", "16", "--window-lengths", "64,128"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    for name in INSTALLED:
        assert f"\n{name} " in out, f"{name} is installed but missing from the table"
    for name, baseline in (("torch", "torch SDPA"), ("jax", "jax.nn.dot_product_attention")):
        if name in INSTALLED:
            assert baseline in out
    assert not re.search(r"^target \d", out, re.M)


def test_memory_job_in_its_own_process() -> None:
    ballast = b"\x01" * (400 * 2**20)  # resident in this process, not the worker
    job = Job("numpy", Case("memory", 128, 128), "attnkit auto", repeats=1)
    m = run_job(job, isolated=True)
    assert m.error is None and m.isolated, m
    assert m.peak_rss_bytes is not None and m.base_rss_bytes is not None
    assert m.peak_rss_bytes >= m.base_rss_bytes > 10 * 2**20  # an interpreter with numpy
    # Linux's ru_maxrss would report this process's peak (the ballast) in the worker.
    assert m.peak_rss_bytes < 300 * 2**20 < len(ballast), m


def test_measure_checks_the_result(monkeypatch: pytest.MonkeyPatch) -> None:
    """A baseline computing something else is reported as wrong, not timed."""
    tools = bench_tools("numpy")
    assert tools is not None
    good = measure(Job("numpy", Case("dense", 32, 32), "numpy textbook", repeats=2))
    assert good.error is None and good.seconds and good.seconds > 0
    assert good.max_error is not None and good.max_error < 1e-5

    def wrong(name, q, k, v, **options):  # returns the keys: fast, but not attention
        return lambda: k

    monkeypatch.setattr(tools, "build", wrong)
    bad = measure(Job("numpy", Case("dense", 32, 32), "numpy textbook", repeats=2))
    assert bad.error is not None and bad.error.startswith("wrong result"), bad


def test_window_baseline_agrees_with_attnkit_window() -> None:
    """The band mask means the same window as attnkit's (W//2, W//2)."""
    if "torch" not in INSTALLED:
        pytest.skip("torch is not installed: pip install torch")
    m = measure(Job("torch", Case("window", 96, 96, 16), "torch SDPA band mask", repeats=1))
    assert m.error is None and m.max_error is not None and m.max_error < 1e-5, m


def test_targets_plan_has_every_target_measurement() -> None:
    jobs = plan(Settings(names=("numpy", "torch", "jax"), plan="targets", repeats=5))
    got = {(j.backend, j.case.describe(), j.impl) for j in jobs}
    assert len(got) == len(jobs), "each measurement once"
    assert ("torch", "dense L=4096", "torch SDPA") in got
    assert ("torch", "window 256 L=8192", "FlexAttention compiled") in got
    assert ("numpy", "dense L=8192", "attnkit auto") in got
    assert ("jax", "window 256 L=16384", "attnkit auto") in got
    assert ("torch", "decode L=1 S=1024", "torch SDPA") in got
    assert ("numpy", "dense L=32768 (one call)", "attnkit auto") in got
    assert any(j.check_backward for j in jobs if j.backend == "torch")


def test_targets_name_baselines_the_backends_offer() -> None:
    for check in checks():
        if check.den is None or check.den[1] in ATTNKIT_IMPLS:
            continue
        case, impl = check.den
        assert impl in baselines_for(check.backend, case.kind, flex=True), check


def _fake(backend: str, case: Case, impl: str, seconds: float, **kw: object) -> Measurement:
    return Measurement(Job(backend, case, impl), seconds=seconds, **kw)


def test_target_lines() -> None:
    dense = TARGET_SIZES.dense()
    memory = TARGET_SIZES.memory()
    results = [
        _fake("numpy", dense, "attnkit auto", 0.2),
        _fake("numpy", dense, "numpy textbook", 1.0),
        _fake("numpy", memory, "attnkit auto", 9.0, peak_rss_bytes=3 * 2**30, isolated=True),
    ]
    selected = ("numpy", "torch") if "torch" in INSTALLED else ("numpy",)
    verdicts = evaluate(checks(), results, selected=selected)
    lines = {(v.check.target, v.check.backend): v for v in verdicts}
    expected = "target 2  dense numpy L=4096  auto / numpy textbook = 0.2  (bound <= 0.3)  MET"
    assert lines[2, "numpy"].line().startswith(expected)
    assert "= 3.00 GiB  (bound < 2 GiB)  NOT MET" in lines[7, "numpy"].line()
    assert lines[7, "jax"].status == "SKIPPED" and "not selected" in lines[7, "jax"].reason
    assert lines[1, "torch"].status == "SKIPPED" and lines[1, "torch"].reason


def test_failed_attnkit_is_not_met_and_failed_baseline_is_skipped() -> None:
    dense = TARGET_SIZES.dense()
    broken = [
        _fake("numpy", dense, "attnkit auto", 0.2, error="wrong result: 1"),
        _fake("numpy", dense, "numpy textbook", 1.0),
    ]
    verdict = next(
        v for v in evaluate(checks(), broken, selected=("numpy",)) if v.check.target == 2
    )
    assert verdict.status == "NOT MET" and "wrong result" in verdict.reason
    failed = [
        _fake("numpy", dense, "attnkit auto", 0.2),
        _fake("numpy", dense, "numpy textbook", 1.0, error="MemoryError"),
    ]
    verdict = next(
        v for v in evaluate(checks(), failed, selected=("numpy",)) if v.check.target == 2
    )
    assert verdict.status == "SKIPPED" and "MemoryError" in verdict.line()


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--repeats", "0"], "expected a positive integer"),
        (["--lengths", "64,x"], "expected a positive integer"),
        (["--lengths", ","], "comma-separated"),
        (["--window", "15"], "even window width"),
        (["--backend", "cupy"], "invalid choice"),
        (["--isolate", "some"], "invalid choice"),
        (["--quick", "--targets"], "not allowed with argument"),
        (["--targets", "--lengths", "64"], "--targets runs exactly"),
        (["--json", "/nonexistent-dir/x.json"], "cannot write the --json file"),
        (["--plot", "/nonexistent-dir/x.png"], "cannot write the --plot file"),
    ],
)
def test_bad_arguments_exit_2(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["bench", *argv])
    assert exit_info.value.code == 2
    captured = capsys.readouterr()
    assert message in captured.err, captured.err
    assert "[1/" not in captured.err  # refused before any benchmarking


def test_json_path_that_is_a_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["bench", "--quick", "--json", str(tmp_path)])
    assert exit_info.value.code == 2
    assert "is a directory" in capsys.readouterr().err


def test_plot_without_matplotlib(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from attnkit.app import display

    monkeypatch.setattr(display, "has_matplotlib", lambda: False)
    with pytest.raises(SystemExit) as exit_info:
        main(["bench", "--quick", "--plot", str(tmp_path / "x.png")])
    assert exit_info.value.code == 2
    assert "pip install matplotlib" in capsys.readouterr().err


def test_attnkit_impls_are_named_after_impl() -> None:
    assert [name.split()[-1] for name in ATTNKIT_IMPLS] == ["auto", "generic"]


def test_rich_display(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("rich")
    from attnkit.app import display

    with display.RichProgress(2) as progress:
        progress.start("first")
        progress.done("first", "1 ms")
    display.print_rich_table("title", ("backend", "case", "impl", "ms", "note"), [list("abcde")])
    captured = capsys.readouterr()
    assert "first: 1 ms" in captured.err and "backend" in captured.out


def test_rounds_give_the_median_the_spread_and_the_highest_peak(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from attnkit.app.bench.report import _median_round, _spread

    job = Job("numpy", Case("dense", 8, 8), ATTNKIT_IMPLS[0])
    slow = Measurement(job, seconds=5.0, peak_rss_bytes=300, base_rss_bytes=10)
    fast = Measurement(job, seconds=1.0, peak_rss_bytes=200, base_rss_bytes=20)
    middle = Measurement(job, seconds=2.0, peak_rss_bytes=100, base_rss_bytes=30)
    m = _median_round([slow, fast, middle])
    assert m.seconds == 2.0 and m.rounds == [5.0, 1.0, 2.0], m
    assert m.peak_rss_bytes == 300 and m.base_rss_bytes == 10
    assert _spread(m) == "1000-5000"
    assert _median_round([slow, fast]).seconds == 3.0  # the median of two: their mean
    broken = Measurement(job, error="boom")
    assert _median_round([fast, broken]).error == "boom", "a failed round must not be hidden"
    assert Settings.for_plan("targets", ("numpy",)).rounds == 3
    assert Settings.for_plan("default", ("numpy",)).rounds == 1
    # --quick: the causal and decode cases at tiny sizes too (the default plan's are L=4096)
    argv = ["bench", "--quick", "--backend", "numpy", "--lengths", "64", "--window-lengths", "128"]
    assert main([*argv, "--window", "16", "--rounds", "2", "--isolate", "none", "--plain"]) == 0
    err = capsys.readouterr().err
    assert "(round 2/2)" in err and "(round 3/2)" not in err


def test_parity_targets_run_more_rounds(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Targets 1 and 8 (attnkit against the kernel it calls) ask for PARITY_ROUNDS; their
    jobs run that often, both sides alike, and the other jobs the plan's rounds."""
    from attnkit.app.bench import report as bench_report
    from attnkit.app.bench.targets import PARITY_ROUNDS, jobs_for

    jobs = jobs_for(checks(TARGET_SIZES), ("torch", "numpy"), repeats=5)
    parity = {(j.case.kind, j.impl) for j in jobs if j.min_rounds == PARITY_ROUNDS}
    assert parity == {
        ("dense", ATTNKIT_IMPLS[0]),
        ("dense", ATTNKIT_IMPLS[1]),
        ("dense", "torch SDPA"),
        ("decode", ATTNKIT_IMPLS[0]),
        ("decode", "torch SDPA"),
        ("causal", ATTNKIT_IMPLS[0]),
        ("causal", "torch SDPA"),
        ("padded", ATTNKIT_IMPLS[0]),
        ("padded", "torch SDPA"),
    }, parity
    assert all(j.backend == "torch" for j in jobs if j.min_rounds)
    small = [
        Job("numpy", Case("dense", 16, 16), ATTNKIT_IMPLS[0], repeats=1, min_rounds=3),
        Job("numpy", Case("dense", 16, 16), "numpy textbook", repeats=1, min_rounds=3),
        Job("numpy", Case("window", 32, 32, 8), ATTNKIT_IMPLS[0], repeats=1),
        Job("numpy", Case("memory", 16, 16), ATTNKIT_IMPLS[0], repeats=1, min_rounds=3),
    ]
    calls: list[Job] = []

    def fake_run_job(job: Job, *, isolated: bool, tuned: bool = False) -> Measurement:
        calls.append(job)
        return Measurement(job, seconds=1e-3 * len(calls))

    monkeypatch.setattr(bench_report, "plan", lambda s: small)
    monkeypatch.setattr(bench_report, "run_job", fake_run_job)
    settings = Settings.for_plan("default", ("numpy",), rounds=2, plain=True)
    results, _ = bench_report.run(settings)
    counts = [sum(c is job for c in calls) for job in small]
    assert counts == [3, 3, 2, 1], counts  # at least min_rounds; the memory case once
    # job 0 ran in calls 1, 5, 9 (ms), job 1 in 2, 6, 10: each job's median round
    assert [round(1e3 * m.seconds) for m in results][:2] == [5, 6], results
    assert "(round 3/3)" in capsys.readouterr().err


def test_workers_get_the_allocator_settings_only_when_tuned(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from attnkit.app.bench.worker import WORKER_ENV, worker_env

    for name in (*WORKER_ENV, "MALLOC_MMAP_MAX_"):
        monkeypatch.delenv(name, raising=False)
    assert not set(WORKER_ENV) & set(worker_env()), "the default: the caller's environment"
    assert "MALLOC_MMAP_MAX_" not in worker_env(heap_only=True)
    monkeypatch.setenv("THP_MEM_ALLOC_ENABLE", "0")  # the caller's choice wins
    env = worker_env(tuned=True)
    assert env["THP_MEM_ALLOC_ENABLE"] == "0"
    assert env["MALLOC_TRIM_THRESHOLD_"] == WORKER_ENV["MALLOC_TRIM_THRESHOLD_"]
    assert "MALLOC_MMAP_MAX_" not in WORKER_ENV  # heap only for growth jobs
    monkeypatch.setenv("MALLOC_MMAP_MAX_", "65536")
    assert worker_env(tuned=True, heap_only=True)["MALLOC_MMAP_MAX_"] == "65536"
    monkeypatch.delenv("MALLOC_MMAP_MAX_")
    assert worker_env(tuned=True, heap_only=True)["MALLOC_MMAP_MAX_"] == "0"


def test_growth_jobs_are_attnkit_on_windows() -> None:
    """Only the two sides of target 6 get the heap-only allocator; baselines compared with
    attnkit, and dense cases, keep glibc's mapping."""
    from attnkit.app.bench.worker import growth_job

    window, dense = Case("window", 8192, 8192, W=256), Case("dense", 4096, 4096)
    assert growth_job(Job("numpy", window, ATTNKIT_IMPLS[0]))
    assert growth_job(Job("torch", window, ATTNKIT_IMPLS[1]))
    assert not growth_job(Job("torch", window, "torch SDPA band mask"))
    assert not growth_job(Job("numpy", dense, ATTNKIT_IMPLS[0]))
    job = Job("numpy", Case("dense", 16, 16), ATTNKIT_IMPLS[0], repeats=1)
    assert run_job(job, isolated=True).error is None
