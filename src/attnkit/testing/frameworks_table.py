"""The README's table "Where attnkit differs from the frameworks", made from the frameworks
table (:mod:`attnkit.testing.frameworks`): one column per framework, one row per
convention (in short words) or behaviour.
"""

from __future__ import annotations

from .frameworks import ATTNKIT, FRAMEWORKS, Framework

__all__ = ["CELLS", "ROWS", "markdown_table"]

#: A convention's variants in a table cell.
CELLS: dict[str, dict[str, str]] = {
    "empty_rows": {"zero": "0", "mean": "mean of the values (uniform weights)", "nan": "NaN"},
    "empty_rows_additive": {"zero": "0", "mean": "mean of the values", "nan": "NaN"},
    "mask_polarity": {"true_attends": "may attend", "true_masks": "masked (may not attend)"},
    "float64_precision": {
        "float64": "float64 throughout",
        "float32": "computed at float32 precision (~1e-7 error)",
    },
    "default_scale": {
        "inv_sqrt_e": "1/sqrt(E)",
        "inv_sqrt_ev": "1/sqrt(Ev)",
        "inv_e": "1/E",
        "one": "1",
    },
    "gqa_mapping": {"grouped": "grouped (query head h reads h // G)", "interleaved": "h % Hkv"},
    "masked_key_nonfinite": {"ignored": "never reaches a row", "leaks": "leaks into the rows"},
    "masked_value_nonfinite": {"ignored": "never reaches a row", "leaks": "leaks into the rows"},
}

#: What a convention needs the framework to take before it can apply.
_NEEDS = {
    "empty_rows": {"attn_mask", "is_causal", "window"},
    "empty_rows_additive": {"attn_mask"},
    "mask_polarity": {"attn_mask"},
    "gqa_mapping": {"enable_gqa"},
    "masked_key_nonfinite": {"attn_mask"},
    "masked_value_nonfinite": {"attn_mask"},
}

#: (row, the convention it shows, or "" for a behaviour in words).
ROWS: tuple[tuple[str, str], ...] = (
    ("causal with L != S", ""),
    ("fully masked row", "empty_rows"),
    ("row an additive mask sets to -inf", "empty_rows_additive"),
    ("bool mask: True means", "mask_polarity"),
    ("`attn_mask` with `is_causal`", ""),
    ("float64 inputs", "float64_precision"),
    ("float16 / bfloat16", ""),
    ("default scale", "default_scale"),
    ("value features Ev != E", ""),
    ("sliding window", ""),
    ("position offsets", ""),
    ("weights returned", ""),
    ("GQA head mapping", "gqa_mapping"),
    ("GQA with key heads != value heads", ""),
    ("soft cap", ""),
    ("NaN/inf in a masked key", "masked_key_nonfinite"),
    ("NaN/inf in a masked value", "masked_value_nonfinite"),
)


def _causal(f: Framework) -> str:
    if "causal_alignment" in f.supports:
        return "`top_left` or `bottom_right`"
    if "is_causal" in f.supports:
        return f"{f.follows()['causal_alignment'].replace('_', '-')} only"
    return "—"


def cell(f: Framework, row: str, convention: str) -> str:
    """What ``f`` does for ``row``: its behaviour in words if the table has one, else its
    convention's variant in short words ("—" where it takes no such call)."""
    if row in f.behaviours:
        return f.behaviours[row]
    if row == "causal with L != S":
        return _causal(f)
    if not convention or (convention in _NEEDS and not _NEEDS[convention] & f.supports):
        return "—"
    return CELLS[convention][f.follows()[convention]]


def markdown_table() -> str:
    """The README's table: a header, then one line per row of :data:`ROWS`."""
    columns = (ATTNKIT, *FRAMEWORKS)
    lines = [
        "| behaviour | " + " | ".join(f.short for f in columns) + " |",
        "|---" * (len(columns) + 1) + "|",
    ]
    for row, convention in ROWS:
        cells = (cell(f, row, convention) for f in columns)
        lines.append(f"| {row} | " + " | ".join(cells) + " |")
    return "\n".join(lines)
