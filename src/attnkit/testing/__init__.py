"""attnkit.testing: check any attention implementation against the float64 oracle."""

from __future__ import annotations

from .adapters import declare
from .assertions import AttentionMismatch, assert_attention_close
from .check import check_attention
from .conventions import CONVENTIONS
from .report import AttentionCheckError, CaseResult, Report
from .run import Unsupported

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
