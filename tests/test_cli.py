"""The command line: ``attnkit demo`` on tiny repeats, and bad arguments."""

from __future__ import annotations

import subprocess
import sys

import pytest

from attnkit import backends
from attnkit.app.cli import main
from attnkit.app.cli.demo import EXAMPLES, run_demo


def test_demo_runs_on_every_installed_backend(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--repeats", "1"]) == 0
    text = capsys.readouterr().out
    installed = [n for n in backends.NAMES if backends.load(n).available()]
    for name in installed:
        assert f"\n{name} " in text, f"{name} is installed but missing from the table:\n{text}"
    assert "(4, 8, 10, 64)" in text and "(4, 10, 128)" in text


def test_demo_errors_are_small() -> None:
    rows, _, trace = run_demo(("numpy",), dtype="float64", repeats=1)
    assert [r.example for r in rows] == list(EXAMPLES)
    assert all(r.max_error < 1e-12 for r in rows), rows
    assert len(trace) == 6


@pytest.mark.parametrize(
    "argv, message",
    [
        (["demo", "--repeats", "0"], "expected a positive integer"),
        (["demo", "--backend", "cupy"], "invalid choice"),
        (["demo", "--dtype", "int8"], "invalid choice"),
        (["frobnicate"], "invalid choice"),
        ([], "required"),
    ],
)
def test_bad_arguments_exit_nonzero(argv: list[str], message: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "attnkit.app.cli", *argv],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 2, result
    assert message in result.stderr, result.stderr


def test_console_script_help() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "attnkit.app.cli", "demo", "--help"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0 and "--backend" in result.stdout
