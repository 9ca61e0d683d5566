"""Kept importable for code written against earlier versions; not public API.

The validated description of a call lives in :mod:`attnkit._problem`, private: the
executors work from it and it changes with them. Front-ends that split a call into
pieces read :class:`attnkit.validation.CallInfo` (from
:func:`attnkit.validation.check_call`) instead.
"""

from __future__ import annotations

from ._problem import Problem, caller_layout, gqa_layout, gqa_mask

__all__ = ["Problem", "caller_layout", "gqa_layout", "gqa_mask"]
