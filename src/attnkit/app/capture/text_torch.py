"""Running texts through a Hugging Face model: tokens, weights and query/key vectors.

:func:`capture_hf` runs one text with ``output_attentions=True`` (never truncated
silently past the model's context) and keeps every layer's weights, and with
``vectors=True`` the query and key vectors (:mod:`.vectors_torch`). :func:`capture_texts`
runs several texts and falls back to eager where attnkit fails.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from attnkit.errors import AttnkitError, ParameterError

from . import vectors_torch as capture_vectors
from .load_torch import LoadedModel, context_limit, to_eager

__all__ = ["Captured", "NoWeights", "TooLong", "capture_hf", "capture_texts"]


class NoWeights(ParameterError):
    """The model returned no attention weights with ``implementation`` (message: the fix)."""

    def __init__(self, message: str, implementation: str) -> None:
        super().__init__(message)
        self.implementation = implementation


class TooLong(ParameterError):
    """The text has more tokens than the model takes; ``tokens``, ``limit``, ``source``."""

    def __init__(self, message: str, tokens: int, limit: int, source: str) -> None:
        super().__init__(message)
        self.tokens, self.limit, self.source = tokens, limit, source


@dataclass(frozen=True)
class Captured:
    """One text's tokens and the attention of every layer: weights ``(N, H, L, L)``.

    With ``vectors=True``: ``queries`` and ``keys`` ``(N, H, L, E)`` (float32, CPU; after
    rotary embeddings, before scaling; GQA key heads repeated to the H query heads) and
    ``scale``, such that per layer and head ``weights == softmax(scale * queries @ keys^T
    + mask)`` (mask: the causal and padding mask, 0 where attended); None where the model
    cannot give them, with the reason in ``vectors_note``.
    """

    tokens: list[str]
    weights: Any  # torch.Tensor (N, H, L, L), float32, detached, CPU
    model: str
    attn_implementation: str
    truncated: bool
    queries: Any = None  # torch.Tensor (N, H, L, E) or None
    keys: Any = None  # torch.Tensor (N, H, L, E) or None
    scale: float | None = None
    vectors_note: str = ""


def _forward_inputs(loaded: LoadedModel, encoded: Any) -> dict[str, Any]:
    """The tokenizer's outputs that the model's forward names (a Llama tokenizer may emit
    ``token_type_ids``, which LlamaModel.forward does not take)."""
    params = inspect.signature(loaded.model.forward).parameters
    named = {
        n
        for n, p in params.items()
        if p.kind not in (inspect.Parameter.VAR_KEYWORD, inspect.Parameter.VAR_POSITIONAL)
    }
    inputs = {key: value for key, value in encoded.items() if key in named}
    if "input_ids" not in inputs:
        raise ParameterError(
            f"{loaded.name} ({type(loaded.model).__name__}) does not take input_ids, so it "
            "cannot read a text; attnkit viz draws text models (encoders and decoders)."
        )
    return inputs


def _forward(loaded: LoadedModel, inputs: dict[str, Any]) -> Any:
    import torch

    try:
        with torch.no_grad():
            return loaded.model(**inputs, output_attentions=True)
    except AttnkitError:
        raise
    except Exception as exc:
        raise ParameterError(
            f"{loaded.name} ({type(loaded.model).__name__}, attn_implementation="
            f"{loaded.attn_implementation!r}) failed on the text: {type(exc).__name__}: "
            f"{str(exc).strip()[:300]}"
        ) from exc


def _weights(loaded: LoadedModel, out: Any) -> Any:
    import torch

    layers = getattr(out, "attentions", None)
    if not layers or any(a is None for a in layers):
        impl = loaded.attn_implementation
        if impl == "eager":
            family = getattr(loaded.model.config, "model_type", None)
            raise NoWeights(
                f"{loaded.name} ({family}, {type(loaded.model).__name__}) returned no attention "
                "weights, even with eager attention: the family has no attention layers that "
                "report weights, so there is no attention to draw.",
                impl,
            )
        raise NoWeights(
            f"{loaded.name} returned no attention weights with attn_implementation={impl!r} "
            "(it computes attention without them); use 'eager' or 'attnkit'.",
            impl,
        )
    return torch.stack([a[0] for a in layers]).detach().float().cpu()  # (N, H, L, L)


def _check_length(loaded: LoadedModel, full: int, max_tokens: int | None) -> None:
    limit, source = context_limit(loaded)
    if limit is None or full <= limit or (max_tokens is not None and max_tokens <= limit):
        return
    raise TooLong(
        f"the text has {full} tokens but {loaded.name} takes at most {limit} ({source}); "
        f"pass max_tokens={limit} (or fewer) to truncate it.",
        full,
        limit,
        source,
    )


def capture_hf(
    loaded: LoadedModel, text: str, *, max_tokens: int | None = None, vectors: bool = False
) -> Captured:
    """Run ``text`` through the model with ``output_attentions=True``; keep every layer.

    The text is tokenized with the model's special tokens and truncated to
    ``max_tokens`` (``Captured.truncated`` says whether it was); without ``max_tokens`` a
    text longer than the model's context (``max_position_embeddings``, ``n_positions``,
    the tokenizer's ``model_max_length``) raises :class:`TooLong`, never truncated
    silently. Only the tokenizer outputs the model's forward names are passed. With
    ``vectors=True`` the query and key vectors are recorded too (see :class:`Captured`).
    Raises :class:`NoWeights` when the model returns no attention weights.
    """
    if not isinstance(text, str) or not text.strip():
        raise ParameterError(f"text must be a non-empty string, got {text!r}.")
    if max_tokens is not None and (
        isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1
    ):
        raise ParameterError(f"max_tokens must be a positive int or None, got {max_tokens!r}.")
    tok = loaded.tokenizer
    full = len(tok(text)["input_ids"])
    _check_length(loaded, full, max_tokens)
    truncate = {"truncation": True, "max_length": max_tokens} if max_tokens else {}
    encoded = tok(text, return_tensors="pt", **truncate)
    inputs = _forward_inputs(loaded, encoded)
    out, recording, note = None, None, ""
    if vectors:
        try:
            with capture_vectors.recording(loaded.model, loaded.attn_implementation) as rec:
                out = _forward(loaded, inputs)
            recording = rec
        except capture_vectors.Unavailable as exc:
            note = str(exc)
        except Exception as exc:  # recording must never cost the weights: run again plain
            note = f"recording the vectors failed ({type(exc).__name__}: {exc})"
    if out is None:
        out = _forward(loaded, inputs)
    weights = _weights(loaded, out)
    tokens = tok.convert_ids_to_tokens(inputs["input_ids"][0].tolist())
    captured = Captured(
        tokens, weights, loaded.name, loaded.attn_implementation, full > len(tokens)
    )
    if recording is not None:
        queries, keys, scale, note = capture_vectors.vectors(recording, tuple(weights.shape))
        captured = dataclasses.replace(captured, queries=queries, keys=keys, scale=scale)
    return dataclasses.replace(captured, vectors_note=note)


def capture_texts(
    loaded: LoadedModel,
    texts: Sequence[str],
    *,
    max_tokens: int | None = None,
    vectors: bool = False,
) -> tuple[LoadedModel, list[Captured]]:
    """:func:`capture_hf` on each text, and the model it ran on.

    When attnkit was chosen by default (``loaded.asked is None``) and fails or gives no
    weights, the model is loaded again with eager (:func:`~.load_torch.to_eager`, the
    note says why) and every text runs there; a text longer than the context
    (:class:`TooLong`) is never a reason to fall back.
    """
    if isinstance(texts, str) or not texts:
        raise ParameterError(f"texts must be a non-empty list of strings, got {texts!r}.")
    for i, text in enumerate(texts):
        if not isinstance(text, str) or not text.strip():
            raise ParameterError(f"texts[{i}] must be a non-empty string, got {text!r}.")
    try:
        return loaded, [
            capture_hf(loaded, t, max_tokens=max_tokens, vectors=vectors) for t in texts
        ]
    except TooLong:
        raise
    except AttnkitError as exc:
        if loaded.asked is not None or loaded.attn_implementation == "eager":
            raise
        loaded = to_eager(loaded, f"attn_implementation='attnkit' failed: {exc}")
    return loaded, [capture_hf(loaded, t, max_tokens=max_tokens, vectors=vectors) for t in texts]
