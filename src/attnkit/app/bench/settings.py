"""What ``attnkit bench`` runs: its settings and the plan of jobs they give.

Three plans: default (dense at ``lengths``, window ``W`` at ``window_lengths``, one
decoding step, the causal and padded cases; attnkit and every baseline), quick (the same
at tiny sizes, not judged) and targets (what :mod:`attnkit.app.bench.targets` needs).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from attnkit import backends

from .cases import ATTNKIT_IMPLS, Case, Job, baselines_for
from .targets import QUICK_SIZES, TARGET_SIZES, Sizes, checks, jobs_for

__all__ = ["Settings", "check_writable", "installed", "plan"]


@dataclass(frozen=True)
class Settings:
    """What to run: ``plan`` is default, quick or targets; ``isolate`` all, memory or none."""

    names: tuple[str, ...]
    plan: str = "default"
    lengths: tuple[int, ...] = (1024, 4096)
    window: int = 256
    window_lengths: tuple[int, ...] = (8192, 16384)
    repeats: int = 5
    flex: bool = False
    isolate: str = "all"
    json_path: str | None = None
    plot_path: str | None = None
    plain: bool = False
    rounds: int = 1  # the timed jobs run this many times, interleaved; the median counts
    tuned_env: bool = False  # workers with tuned allocator settings (worker.WORKER_ENV)

    @property
    def sizes(self) -> Sizes:
        """The sizes the target lines are evaluated at."""
        return QUICK_SIZES if self.plan == "quick" else TARGET_SIZES

    @classmethod
    def for_plan(cls, plan: str, names: tuple[str, ...], **given: Any) -> Settings:
        """Settings of ``plan`` with the options ``given`` (None: the plan's default)."""
        defaults: dict[str, Any] = {}
        if plan == "quick":  # the quick sizes, so that every target's ratio can print
            q = QUICK_SIZES
            defaults = dict(
                lengths=(q.dense_L, q.window_L[0]),
                window=q.W,
                window_lengths=q.window_L,
                repeats=3,
                isolate="memory",
            )
        elif plan == "targets":
            defaults = dict(rounds=3)
        chosen = {key: value for key, value in given.items() if value is not None}
        return cls(names=names, plan=plan, **{**defaults, **chosen})


def plan(s: Settings) -> list[Job]:
    """The jobs of a run, grouped by backend so that ratios are measured close in time."""
    if s.plan == "targets":
        return jobs_for(checks(TARGET_SIZES), s.names, s.repeats)
    cases = [Case("dense", L, L) for L in s.lengths]
    cases += [Case("window", L, L, s.window) for L in s.window_lengths]
    cases.append(s.sizes.decode())
    cases += [s.sizes.causal(), s.sizes.padded()]
    if s.plan == "quick":
        cases.append(s.sizes.memory())
    jobs = []
    for name in s.names:
        for case in cases:
            ours = ATTNKIT_IMPLS[:1] if case.kind == "memory" else ATTNKIT_IMPLS
            for impl in (*ours, *baselines_for(name, case.kind, flex=s.flex)):
                backward = name == "torch" and case.kind == "window" and impl == ATTNKIT_IMPLS[0]
                jobs.append(Job(name, case, impl, repeats=s.repeats, check_backward=backward))
    return jobs


def check_writable(path: str) -> str | None:
    """Why ``path`` cannot be written (checked before any benchmarking), or None."""
    p = Path(path)
    if p.is_dir():
        return f"{path} is a directory"
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.is_dir():
        return f"the directory {parent} does not exist"
    if not os.access(parent, os.W_OK) or (p.exists() and not os.access(p, os.W_OK)):
        return f"{path} is not writable"
    return None


def installed(names: tuple[str, ...]) -> tuple[tuple[str, ...], list[str]]:
    """(the installed backends of ``names``, "name: install hint" for the others)."""
    ok = tuple(n for n in names if backends.load(n).available())
    missing = [f"{n}: {backends.load(n).install_hint}" for n in names if n not in ok]
    return ok, missing
