"""Re-exports :class:`attnkit._problem.Problem`, the executors' private description of a call;
not public API. Front-ends read :class:`attnkit.validation.CallInfo` instead.
"""

from __future__ import annotations

from ._problem import Problem, caller_layout, gqa_layout, gqa_mask

__all__ = ["Problem", "caller_layout", "gqa_layout", "gqa_mask"]
