"""attnkit.testing: check any attention implementation against attnkit's float64 oracle.

The oracle (:mod:`attnkit.testing.oracle`, NumPy, written independently of attnkit's
executor), the tolerance table (:mod:`~attnkit.testing.tolerances`) and the conformance
cases that check attnkit itself, as a kit for anyone's kernel, port or framework:

- :func:`check_attention` runs the kit's cases (:mod:`~attnkit.testing.cases`: shapes
  with L != S, zero lengths, masks in several broadcast forms, rows with no key, both
  causal alignments, windows, offsets, GQA, soft caps, NaN where no query may attend,
  non-contiguous inputs, large logits, each dtype) and a hypothesis fuzzer against
  ``fn(query, key, value, **kwargs)``, forward and, where declared, gradients, and
  returns a :class:`Report` (``ok``; ``str()`` names every difference and the
  convention behind it; under pytest a difference fails the test with the report);
- :func:`assert_attention_close` checks one result (and its weights, lse, gradients),
  in the manner of ``torch.testing.assert_close``;
- conventions (:mod:`~attnkit.testing.conventions`): each known way implementations
  differ, with a detector. A report says which one a function follows; declared with
  ``conventions={...}``, the check holds the function to it instead;
- the frameworks' conventions as one table (:mod:`~attnkit.testing.frameworks`);
- adapters for other signatures (:mod:`~attnkit.testing.adapters`: jax.nn's (B, T, N, H),
  FlashAttention's ``window_size``, Hugging Face's ``sliding_window``) and translators
  both ways (:mod:`~attnkit.testing.translate`, ``translate_torch`` for FlexAttention's
  ``mask_mod`` and ``BlockMask``);
- ``pytest --attnkit-check package.module:function`` and ``attnkit verify --against
  package.module:function``, which print the same report.

Importing it imports no framework (nor NumPy until a function is used); hypothesis, for
the fuzzer, is the extra ``pip install "attnkit[testing]"`` (without it the fixed cases
run and the report says so).

Example
-------

The function under check takes query (B, Hq, L, E), key (B, Hkv, S, E), value
(B, Hkv, S, Ev) arrays of one library (``library=``: "numpy", "torch", "jax",
"array_api_strict") and returns the output (B, Hq, L, Ev) in the inputs' library,
dtype and device. ``supports`` names the keyword arguments it takes, in attnkit's names
(``attn_mask`` bool with True = may attend, or additive; ``is_causal``, ``scale``,
``enable_gqa``, ``causal_alignment``, ``window=(left, right)``, ``q_offset``,
``kv_offset``, ``softcap=c`` for c * tanh(s / c)); the default is what its signature
names. Cases that need another are skipped, with that reason.

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

The report is one line per difference (the measured and the allowed error, the rows
that differ, the convention behind it), then the skipped cases by reason.

Options: ``conventions={"empty_rows": "mean"}`` holds the function to those variants
(every convention and variant: :data:`CONVENTIONS`); ``dtypes`` (default float64 and
float32: every case in the widest, the dtype-sensitive ones in each); ``gradients=True``
compares the gradients of ``sum(out * g)`` (PyTorch, JAX) with the oracle's analytic
ones in float64; ``examples`` the fuzzer's calls (default 20); ``cases`` a subset by
name; ``device``; ``raise_on_failure``. :func:`declare` attaches these to a function,
for the plugin and the command line. A function raises :class:`Unsupported` for a call
it cannot express (skipped with that reason); whatever else it does (raises, returns
the wrong shape, dtype, library or device, NaN, writes into its inputs, is not callable)
becomes a line of the report, never a crash of the kit.
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
