"""``attnkit bench --devices N`` / ``--procs N``: real ring runs at a tiny length, the
report's table and verdict lines, and the refused combinations."""

from __future__ import annotations

import pytest

from attnkit.app import cli
from attnkit.app.bench import distributed


def test_counts_are_powers_of_two_up_to_n() -> None:
    assert distributed._counts(1) == [1]
    assert distributed._counts(4) == [1, 2, 4]
    assert distributed._counts(6) == [1, 2, 4, 6]


@pytest.mark.parametrize("framework", ["jax", "torch"])
def test_ring_bench_runs_and_checks(framework: str) -> None:
    pytest.importorskip(framework)
    rows = distributed.run(framework, 2, 256, 1)
    assert [(r.backward, r.parts) for r in rows] == [(False, 1), (False, 2), (True, 1), (True, 2)]
    for r in rows:
        assert r.ok, r
        assert r.peak_mib and r.peak_mib > 0 and r.seconds and r.seconds > 0, r
        assert r.error is not None and r.error < 1e-4, r
    report = distributed.format_report(rows, 256, judged=False)
    assert f"target ring memory  {framework} forward: P = 4 not measured" in report


def test_verdict_lines() -> None:
    Row = distributed.Row
    rows = [Row("jax", b, p, 100.0 / p**1.5, 1.0, 0.0, True) for b in (False, True) for p in (1, 4)]
    lines = distributed._verdicts(rows, 32768, judged=True)
    assert lines[0].startswith("target ring memory  jax forward L=32768: peak per device P=4")
    assert "= 0.125  (bound <= 0.35)  MET" in lines[0]
    worse = [
        Row("torch", False, 1, 10.0, 1.0, 0.0, True),
        Row("torch", False, 4, 5.0, 1.0, 0, True),
    ]
    assert "NOT MET" in distributed._verdicts(worse, 32768, judged=True)[0]
    halves = [Row("torch", False, p, 10.0 / p**0.5, 1.0, 0.0, True) for p in (1, 2, 4)]
    lines = distributed._verdicts(halves, 4096, judged=True)
    assert "P=4 / P=1 = 0.500  (bound <= 0.35)  NOT MET" in lines[0], lines
    assert "P=2 / P=1 = 0.707  (bound <= 0.65)  NOT MET" in lines[1], lines


def test_cli_refuses_options_that_do_not_apply(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        cli.main(["bench", "--devices", "4", "--flex"])
    assert info.value.code == 2
    assert "drop --flex" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.main(["bench", "--procs", "2", "--lengths", "256,512"])
    assert "take one length" in capsys.readouterr().err
