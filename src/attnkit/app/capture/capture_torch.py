"""Capture attention weights from PyTorch modules and Hugging Face models.

Three ways in, from the most to the least explicit:

``weights_of(result)``
    the weights of anything that returns ``(output, weights)``.
``AttentionRecorder(model, modules)``
    forward hooks that keep the weights each attention module returns, in call order.
``capture_hf(loaded, text)``
    a Hugging Face model run with ``output_attentions=True``: tokens and weights
    ``(N, H, L, L)``, and with ``vectors=True`` the query and key vectors
    (:mod:`.vectors_torch`). ``load_hf(folder)`` and ``load_minilm()`` load a model
    offline (:mod:`.load_torch`); ``capture_texts`` runs several texts (:mod:`.text_torch`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from attnkit.errors import ArgumentTypeError, ParameterError
from attnkit.shapes import type_name

from .load_torch import (
    MINILM_NAME,
    MODELS_HINT,
    BadImplementation,
    LoadedModel,
    context_limit,
    load_hf,
    load_minilm,
    minilm_path,
    to_eager,
)
from .text_torch import Captured, NoWeights, TooLong, capture_hf, capture_texts

__all__ = [
    "MINILM_NAME",
    "MODELS_HINT",
    "AttentionRecorder",
    "BadImplementation",
    "Captured",
    "LoadedModel",
    "NoWeights",
    "TooLong",
    "capture_hf",
    "capture_texts",
    "context_limit",
    "load_hf",
    "load_minilm",
    "minilm_path",
    "to_eager",
    "weights_of",
]


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
