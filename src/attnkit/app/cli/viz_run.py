"""``attnkit viz`` after the checks: load the model, run the texts, write the file.

Everything that can only be known once the model is loaded is an ``error:`` line, never a
traceback: exit status 2 where another argument fixes it (a text longer than the model's
context: ``--max-tokens``; a model that gives no weights or an unknown implementation:
``--attn-implementation``), 1 otherwise (a folder that is not a model, a model with no
attention). torch and transformers are reached through :mod:`attnkit.app.capture.capture_torch`,
imported when the model is loaded.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from attnkit.errors import AttnkitError

from ..progress import Progress
from .viz_picture import Missing, page, picture

__all__ = ["check_indices", "run"]


def check_indices(
    parser: Any, args: argparse.Namespace, layers: Any, heads: Any, name: str
) -> None:
    """Refuse ``--layer``/``--head`` beyond the model's layers and heads (None: unknown)."""
    if args.layer is not None and layers is not None and args.layer >= layers:
        parser.error(
            f"--layer {args.layer} is out of range: {name} has {layers} layers, "
            f"valid 0..{layers - 1}"
        )
    if isinstance(args.head, int) and heads is not None and args.head >= heads:
        parser.error(
            f"--head {args.head} is out of range: {name} has {heads} heads per "
            f"layer, valid 0..{heads - 1}, or all, mean, max"
        )


def run(args: argparse.Namespace, path: Path, name: str, fmt: str, models: dict[str, Any]) -> int:
    """Load the model, run the texts, write ``args.out``; the exit status (0, 1 or 2)."""
    from attnkit.app.capture import capture_torch as capture

    try:
        return _draw(args, capture, path, name, fmt, models)
    except Missing as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except capture.TooLong as exc:
        subject = "the text" if len(args.text) == 1 else "a text"
        print(
            f"error: {subject} has {exc.tokens} tokens but {name} takes at most {exc.limit} "
            f"({exc.source}); pass --max-tokens {exc.limit} (or fewer) to truncate it",
            file=sys.stderr,
        )
        return 2
    except capture.NoWeights as exc:
        if exc.implementation == "eager":  # no attention to draw: no argument fixes it
            print(f"error: {exc}", file=sys.stderr)
            return 1
        print(
            f"error: {name} returned no attention weights with --attn-implementation "
            f"{exc.implementation} (it computes attention without them); use "
            "--attn-implementation eager or attnkit",
            file=sys.stderr,
        )
        return 2
    except capture.BadImplementation as exc:
        print(f"error: --attn-implementation: {exc}", file=sys.stderr)
        return 2
    except AttnkitError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


def _draw(
    args: argparse.Namespace, capture: Any, path: Path, name: str, fmt: str, models: Any
) -> int:
    html = fmt == "html"
    with Progress(4, "viz", args.plain) as progress:
        progress.step(f"loading {name}")
        if args.model in models and args.attn_implementation is None:
            loaded = capture.load_minilm()
        else:
            loaded = capture.load_hf(path, name, args.attn_implementation)
        some = "the text" if len(args.text) == 1 else f"{len(args.text)} texts"
        progress.step(f"running {name} on {some}")
        loaded, captured = capture.capture_texts(
            loaded, args.text, max_tokens=args.max_tokens, vectors=html
        )
        N, H = captured[0].weights.shape[:2]
        check_indices(args.parser, args, N, H, name)  # models whose config said nothing
        progress.step("drawing")
        made, what = page(args, captured) if html else picture(args, captured[0])
        progress.step(f"writing {args.out}")
        from attnkit import viz

        viz.save(made, args.out, **({} if html else {"dpi": args.dpi}))
    counts = [len(c.tokens) for c in captured]
    tokens = f"{counts[0]} tokens" if len(counts) == 1 else f"{', '.join(map(str, counts))} tokens"
    truncated = any(c.truncated for c in captured)
    print(
        f"model: {captured[0].model} ({N} layers x {H} heads), {tokens}"
        + (f" (truncated to --max-tokens {args.max_tokens})" if truncated else "")
    )
    print(f'attention: attn_implementation="{loaded.attn_implementation}" ({loaded.note})')
    if html:
        notes = sorted({c.vectors_note for c in captured if c.queries is None})
        if notes:
            print(f"neuron view: unavailable ({'; '.join(notes)})")
        else:
            extra = sorted({c.vectors_note for c in captured if c.vectors_note})
            print("neuron view: query and key vectors recorded" + "".join(f" ({n})" for n in extra))
    print(f"wrote {args.out}: {what} ({os.path.getsize(args.out)} bytes)")
    return 0
