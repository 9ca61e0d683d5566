"""The application's PyTorch half: what the tools need of torch and transformers.

PyTorch's own attention for ``attnkit bench`` and ``attnkit verify`` (:mod:`.peers`,
:mod:`.peers_grad`, :mod:`.peers_exact`, :mod:`.peers_hf`), attention captured from
modules and Hugging Face models for ``attnkit viz`` (:mod:`.capture`, with
:mod:`.capture_load`, :mod:`.capture_text`, :mod:`.capture_vectors`), MiniLM's queries,
keys and values for ``attnkit bench --approx`` (:mod:`.minilm_qkv`), and the ring
attention benchmark over gloo processes (:mod:`.distributed_bench`). The rest of
:mod:`attnkit.app` imports these lazily, by name, so that it loads no framework itself;
this package imports no other framework package of the application.
"""

from __future__ import annotations

__all__: list[str] = []
