"""attnkit.testing: check any attention implementation against attnkit's float64 oracle.

The oracle (:mod:`attnkit.testing.oracle`), the tolerance table
(:mod:`~attnkit.testing.tolerances`) and attnkit's own conformance cases, as a kit for
anyone's kernel, port or framework:

- :func:`check_attention` runs the kit's cases (:mod:`~attnkit.testing.cases`) and a
  hypothesis fuzzer against ``fn(query, key, value, **kwargs)``, forward and, where
  declared, gradients, and returns a :class:`Report` (``ok``; ``str()`` names every
  difference and the convention behind it);
- :func:`assert_attention_close` checks one result, as ``torch.testing.assert_close``;
- conventions (:mod:`~attnkit.testing.conventions`): each known way implementations
  differ, with a detector; declared with ``conventions={...}``, the check holds the
  function to them;
- adapters for other signatures (:mod:`~attnkit.testing.adapters`) and translators
  (:mod:`~attnkit.testing.translate`);
- ``pytest --attnkit-check package.module:function`` and ``attnkit verify --against
  package.module:function``, which print the same report.

Importing it imports no framework; the fuzzer needs ``pip install "attnkit[testing]"``.

Example
-------

The function under check takes query (B, Hq, L, E), key (B, Hkv, S, E), value
(B, Hkv, S, Ev) arrays of one ``library`` and returns (B, Hq, L, Ev) in the inputs'
library, dtype and device. ``supports`` names the keyword arguments it takes, in
attnkit's names (default: its signature's); cases needing another are skipped.

.. code-block:: python

    import math

    import numpy as np
    from attnkit.testing import assert_attention_close, check_attention


    def attention(query, key, value, is_causal=False):  # a textbook kernel, under check
        s = query @ np.swapaxes(key, -1, -2) / math.sqrt(query.shape[-1])
        if is_causal:
            s = np.where(np.tri(*s.shape[-2:], dtype=bool), s, -np.inf)
        w = np.exp(s - s.max(axis=-1, keepdims=True, initial=-np.inf))
        return w / w.sum(axis=-1, keepdims=True) @ value


    report = check_attention(attention, examples=0, raise_on_failure=False)
    assert report.ok, report  # the plain cases and causal ones all agree
    print(str(report).splitlines()[0])

    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((2, 4, 16, 8)) for _ in range(3))
    assert_attention_close(attention(q, k, v, is_causal=True), q, k, v, is_causal=True)

Options (``conventions``, ``dtypes``, ``gradients``, ``examples``, ``cases``, ``device``):
:func:`check_attention`; :func:`declare` attaches them to a function. Whatever the
function does becomes a line of the report, never a crash of the kit.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = [
    "CONVENTIONS",
    "AttentionCheckError",
    "AttentionMismatch",
    "CaseResult",
    "Report",
    "Unsupported",
    "assert_attention_close",
    "check_attention",
    "declare",
]

#: Where each public name lives (imported on first use: importing attnkit.testing stays
#: cheap, which matters for the pytest plugin that every pytest run in the environment loads).
_HOMES = {
    "CONVENTIONS": "conventions",
    "AttentionCheckError": "report",
    "AttentionMismatch": "assertions",
    "CaseResult": "report",
    "Report": "report",
    "Unsupported": "run",
    "assert_attention_close": "assertions",
    "check_attention": "check",
    "declare": "adapters",
}


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module 'attnkit.testing' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_HOMES[name]}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
