"""Attention captured from a model for ``attnkit viz``: a torch module or a Hugging Face
model run on texts, its attention weights recorded per layer and head.

:mod:`.capture_torch` is the entry (:func:`~.capture_torch.capture`), with the model's
loading (:mod:`.load_torch`), the texts' run (:mod:`.text_torch`) and the recording
attention function (:mod:`.vectors_torch`). Every module here needs torch (and
transformers for a model by name); the command line imports them when ``attnkit viz``
loads a model, never for ``--help``.
"""

from __future__ import annotations

__all__: list[str] = []
