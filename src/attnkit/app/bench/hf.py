"""``attnkit bench --hf``: transformers models under attnkit, eager and sdpa.

Two workloads, each one model loaded once and switched between attention
implementations (``attnkit.app.bench.peers_hf_torch``), float32, no grad: all-MiniLM-L6-v2's
forward on a padded batch of sentences (embeddings compared with eager's), and a tiny
random Llama's greedy ``generate()`` on left-padded prompts (tokens must equal eager's).
After a warm-up round, each round times one sample of every implementation in turn
(:func:`attnkit.app.bench.measure.timed`); the median is reported.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any

from attnkit import backends

from ..tables import table
from .measure import timed

__all__ = [
    "IMPLS",
    "TOLERANCE",
    "HFMeasurement",
    "format_table",
    "measure",
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
    from attnkit.app.bench import peers_hf_torch as peers_hf

    return peers_hf.missing_requirements()


def measure_minilm(
    batch: int = 32, repeats: int = 5, impls: tuple[str, ...] = IMPLS
) -> tuple[dict[str, Any], list[HFMeasurement]]:
    """Time MiniLM's forward on ``batch`` sentences under each of ``impls``."""
    from attnkit.app.bench import peers_hf_torch as peers_hf

    forward = peers_hf.MiniLMForward(sentences(batch))
    info = {**forward.info, "workload": "minilm"}
    return measure(forward, info, repeats, impls, tolerance=TOLERANCE)


def measure_generate(
    batch: int = 4, new_tokens: int = 32, repeats: int = 5, impls: tuple[str, ...] = IMPLS
) -> tuple[dict[str, Any], list[HFMeasurement]]:
    """Time a tiny Llama's greedy generate() of ``new_tokens`` under each of ``impls``."""
    from attnkit.app.bench import peers_hf_torch as peers_hf

    forward = peers_hf.TinyLlamaGenerate(batch=batch, new_tokens=new_tokens)
    info = {**forward.info, "workload": "generate"}
    return measure(forward, info, repeats, impls, tolerance=0.0)


def measure(
    forward: Any,
    info: dict[str, Any],
    repeats: int,
    impls: tuple[str, ...] = IMPLS,
    *,
    tolerance: float,
) -> tuple[dict[str, Any], list[HFMeasurement]]:
    """Time ``forward`` (``use(impl)``, then a call; ``difference(a, b)``) under each of
    ``impls``, round-robin after a warm-up round; a result that differs from eager's by
    more than ``tolerance`` is an error.

    Returns (facts about the run: batch, token lengths, threads; one measurement per
    implementation, in the order of ``impls``).
    """
    info = {**info, "repeats": repeats}
    adapter = backends.load("torch")
    order = ("eager", *[i for i in impls if i != "eager"])  # eager first: the reference
    results = {impl: HFMeasurement(impl) for impl in order}
    embeddings: dict[str, Any] = {}
    # Round-robin: one sample of each implementation per round, so that a change in the
    # machine's load during the run weighs on every implementation alike.
    for _ in range(repeats + 1):  # the first round is the warm-up
        for impl in order:
            m = results[impl]
            if m.error:
                continue
            try:
                forward.use(impl)
                embedding, samples, _ = timed(forward, adapter, 1)
            except Exception as exc:  # report the failure, keep timing the others
                m.error = f"{type(exc).__name__}: {exc}"
                continue
            if impl not in embeddings:  # warm-up round: check the result once
                embeddings[impl] = embedding
                m.max_error = forward.difference(embedding, embeddings["eager"])
                if not m.max_error <= tolerance:
                    m.error = f"wrong result: differs from eager's by {m.max_error:.3g}"
            else:
                m.samples.append(statistics.median(samples))
    for m in results.values():
        m.seconds = statistics.median(m.samples) if m.samples and not m.error else None
    return info, [results[impl] for impl in impls]


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
            "-" if r.max_error is None else f"{r.max_error:.3g}",
            r.error or "",
        )
        for r in results
    ]
    generate = info.get("workload") == "generate"
    against = "tokens != eager" if generate else "max |emb - eager|"
    headers = ("attn_implementation", "median (ms)", "/ eager", "/ sdpa", against, "")
    lines = [line.rstrip() for line in table(headers, rows).splitlines()]
    if generate:
        title = (
            f"tiny Llama generate(), {info['new_tokens']} new tokens greedy, batch "
            f"{info['batch']} prompts of {info['min_tokens']} to {info['max_tokens']} tokens "
            f"(left-padded), float32, torch {info['torch']}, {info['threads']} threads, "
            f"median of {info['repeats']}"
        )
    else:
        title = (
            f"all-MiniLM-L6-v2 forward, batch {info['batch']} sentences of "
            f"{info['min_tokens']} to {info['max_tokens']} tokens (padded), float32, torch "
            f"{info['torch']}, {info['threads']} threads, median of {info['repeats']}"
        )
    return "\n".join([title, *lines])
