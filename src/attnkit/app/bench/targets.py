"""attnkit's performance targets as data: which measurements each needs, and its verdict line.

The targets (listed in :mod:`attnkit.app.bench`) are stated here, at
:data:`TARGET_SIZES`; ``attnkit bench --targets`` measures them. Every target is a ratio
of two times measured in the same run, except target 7 (peak resident memory) and the
second half of target 4 (the backward pass runs). A verdict line reads::

    target 1  dense torch L=4096  auto / torch SDPA = 0.97  (bound <= 1.05)  MET

and says SKIPPED with the reason where a measurement is missing (a backend not installed
or not selected, a baseline that failed), NOT MET where attnkit itself failed.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from attnkit import backends

from ..tables import milliseconds
from .cases import Case, Job, Measurement

__all__ = [
    "MEMORY_BOUND_BYTES",
    "PARITY_ROUNDS",
    "QUICK_SIZES",
    "TARGET_SIZES",
    "Check",
    "Sizes",
    "TargetResult",
    "checks",
    "evaluate",
    "jobs_for",
]

MEMORY_BOUND_BYTES = 2 * 2**30
AUTO, GENERIC = "attnkit auto", "attnkit generic"


@dataclass(frozen=True)
class Sizes:
    """The sizes the targets are stated at (``W`` is the window's total width)."""

    dense_L: int = 4096
    W: int = 256
    window_L: tuple[int, int] = (8192, 16384)
    memory_L: int = 32768
    decode_S: int = 1024

    def dense(self, L: int | None = None) -> Case:
        L = self.dense_L if L is None else L
        return Case("dense", L, L)

    def window(self, L: int) -> Case:
        return Case("window", L, L, self.W)

    def decode(self) -> Case:
        return Case("decode", 1, self.decode_S)

    def causal(self) -> Case:
        return Case("causal", self.dense_L, self.dense_L)

    def padded(self) -> Case:
        return Case("padded", 1, self.decode_S)

    def memory(self) -> Case:
        return Case("memory", self.memory_L, self.memory_L)


#: The sizes the targets are stated at.
TARGET_SIZES = Sizes()
#: The same ratios at tiny sizes, for smoke runs (not judged against the bounds).
QUICK_SIZES = Sizes(dense_L=256, W=32, window_L=(512, 1024), memory_L=1024, decode_S=256)


@dataclass(frozen=True)
class Check:
    """One verdict line: ``kind`` is ratio (num / den <= bound), memory or backward."""

    target: int
    backend: str
    what: str
    name: str
    kind: str
    num: tuple[Case, str]
    den: tuple[Case, str] | None = None
    bound: float = 0.0
    op: str = "<="
    #: Rounds the check's jobs run at least (0: the plan's). Targets 1 and 8 compare
    #: attnkit with the very kernel it calls, so their ratio sits near 1 and the speed of
    #: the worker process (15% apart from one process to the next here, in either
    #: direction) would decide it; their jobs take seconds, so each side gets more
    #: rounds and its fastest counts.
    min_rounds: int = 0


#: Rounds of the jobs of targets 1 and 8 (Check.min_rounds).
PARITY_ROUNDS = 7


def checks(sizes: Sizes = TARGET_SIZES) -> list[Check]:
    """Targets 1-8 (this module's docstring) at ``sizes``."""
    dense, (w1, w2) = sizes.dense(), sizes.window_L
    win1, win2 = sizes.window(w1), sizes.window(w2)
    out = [
        Check(1, "torch", dense.describe("torch"), "auto / torch SDPA", "ratio",
              (dense, AUTO), (dense, "torch SDPA"), 1.05, min_rounds=PARITY_ROUNDS),
        Check(1, "torch", dense.describe("torch"), "generic / torch SDPA", "ratio",
              (dense, GENERIC), (dense, "torch SDPA"), 1.5, min_rounds=PARITY_ROUNDS),
        Check(2, "numpy", dense.describe("numpy"), "auto / numpy textbook", "ratio",
              (dense, AUTO), (dense, "numpy textbook"), 0.3),
        Check(3, "jax", dense.describe("jax"), "auto / jax.nn.dot_product_attention", "ratio",
              (dense, AUTO), (dense, "jax.nn.dot_product_attention"), 0.7),
        Check(4, "torch", win1.describe("torch"), "auto / torch SDPA band mask", "ratio",
              (win1, AUTO), (win1, "torch SDPA band mask"), 0.06),
        Check(4, "torch", win1.describe("torch"), "auto / FlexAttention compiled", "ratio",
              (win1, AUTO), (win1, "FlexAttention compiled"), 1.0, "<"),
        Check(4, "torch", win1.describe("torch"), "auto forward+backward", "backward",
              (win1, AUTO)),
    ]  # fmt: skip
    for name in ("numpy", "jax"):
        out.append(
            Check(5, name, win1.describe(name), f"window / dense L={w1} (auto)", "ratio",
                  (win1, AUTO), (sizes.dense(w1), AUTO), 0.12)
        )  # fmt: skip
    for name in backends.NAMES:
        what = f"window {sizes.W} {name}"
        out.append(
            Check(
                6, name, what, f"L={w2} / L={w1} (auto)", "ratio", (win2, AUTO), (win1, AUTO), 2.2
            )
        )
    for name in ("numpy", "torch", "jax"):
        memory = sizes.memory()
        out.append(
            Check(7, name, memory.describe(name), "auto peak RSS", "memory", (memory, AUTO),
                  bound=MEMORY_BOUND_BYTES, op="<")
        )  # fmt: skip
    decode, padded, causal = sizes.decode(), sizes.padded(), sizes.causal()
    out.append(
        Check(8, "torch", decode.describe("torch"), "auto / torch SDPA", "ratio",
              (decode, AUTO), (decode, "torch SDPA"), 1.3, min_rounds=PARITY_ROUNDS)
    )  # fmt: skip
    # the same bounds with masked pairs, where the fused path checks its output for NaN
    out.append(
        Check(1, "torch", causal.describe("torch"), "auto / torch SDPA", "ratio",
              (causal, AUTO), (causal, "torch SDPA"), 1.05, min_rounds=PARITY_ROUNDS)
    )  # fmt: skip
    out.append(
        Check(8, "torch", padded.describe("torch"), "auto / torch SDPA", "ratio",
              (padded, AUTO), (padded, "torch SDPA"), 1.3, min_rounds=PARITY_ROUNDS)
    )  # fmt: skip
    return out


def jobs_for(all_checks: Iterable[Check], names: Sequence[str], repeats: int) -> list[Job]:
    """The jobs the checks of backends ``names`` need, each once, grouped by backend."""
    wanted: dict[tuple[str, Case, str], tuple[bool, int]] = {}
    for check in all_checks:
        if check.backend not in names:
            continue
        for case, impl in (check.num, check.den) if check.den else (check.num,):
            key = (check.backend, case, impl)
            backward, rounds = wanted.get(key, (False, 0))
            wanted[key] = (backward or check.kind == "backward", max(rounds, check.min_rounds))
    jobs = [
        Job(backend, case, impl, repeats=repeats, check_backward=backward, min_rounds=rounds)
        for (backend, case, impl), (backward, rounds) in wanted.items()
    ]
    order = {name: i for i, name in enumerate(names)}

    def key(j: Job) -> tuple[int, bool, int, str]:  # the one-call memory case last
        return order[j.backend], j.case.kind == "memory", j.case.L, j.case.kind

    return sorted(jobs, key=key)  # stable: the implementations of a case stay in target order


@dataclass
class TargetResult:
    """A check's verdict: status MET, NOT MET, SKIPPED or QUICK (tiny sizes, not judged)."""

    check: Check
    value: float | None
    status: str
    reason: str = ""
    detail: str = ""

    def line(self) -> str:
        c = self.check
        head = f"target {c.target}  {c.what}  {c.name}"
        if self.value is None:
            return f"{head}  {self.status} ({self.reason})"
        if c.kind == "memory":
            text = f"= {self.value / 2**30:.2f} GiB  (bound {c.op} {c.bound / 2**30:g} GiB)"
        elif c.kind == "backward":
            text = f"= {self.value:.3f} s  (must run: gradients finite)"
        else:
            text = f"= {self.value:.3g}  (bound {c.op} {c.bound:g})"
        extra = f"  [{self.detail}]" if self.detail else ""
        status = self.status + (f" ({self.reason})" if self.reason else "")
        return f"{head} {text}  {status}{extra}"

    def to_json(self) -> dict[str, object]:
        c = self.check
        return {
            "target": c.target,
            "backend": c.backend,
            "what": c.what,
            "name": c.name,
            "kind": c.kind,
            "value": self.value,
            "bound": c.bound,
            "op": c.op,
            "status": self.status,
            "reason": self.reason,
            "detail": self.detail,
            "line": self.line(),
        }


def evaluate(
    all_checks: Iterable[Check],
    measurements: Iterable[Measurement],
    *,
    selected: Sequence[str],
    judged: bool = True,
    hint: str = "run attnkit bench --targets",
) -> list[TargetResult]:
    """A verdict for every check from this run's ``measurements``."""
    found = {(m.job.backend, m.job.case, m.job.impl): m for m in measurements}
    return [_verdict(c, found, selected, judged, hint) for c in all_checks]


def _verdict(
    c: Check,
    found: dict[tuple[str, Case, str], Measurement],
    selected: Sequence[str],
    judged: bool,
    hint: str,
) -> TargetResult:
    def skip(reason: str, status: str = "SKIPPED") -> TargetResult:
        return TargetResult(c, None, status, reason)

    adapter = backends.load(c.backend)
    if not adapter.available():
        return skip(f"{c.backend} is not installed: {adapter.install_hint}")
    if c.backend not in selected:
        return skip(f"{c.backend} not selected with --backend")
    parts = [c.num] + ([c.den] if c.den else [])
    got = [found.get((c.backend, case, impl)) for case, impl in parts]
    for (case, impl), m in zip(parts, got, strict=True):
        if m is None:
            return skip(f"{impl} on {case.describe()} not measured in this run; {hint}")
        if m.error:
            status = "NOT MET" if impl == c.num[1] else "SKIPPED"
            return skip(f"{impl} on {case.describe()}: {m.error}", status)
    num = got[0]
    assert num is not None and num.seconds is not None
    detail = ""
    if c.kind == "memory":
        if not num.isolated or num.peak_rss_bytes is None:
            return skip("peak memory needs the job in its own process (--isolate all or memory)")
        value = float(num.peak_rss_bytes)
        if num.base_rss_bytes is not None:
            detail = f"{(value - num.base_rss_bytes) / 2**30:+.2f} GiB over the inputs"
        detail += f"; {num.seconds:.1f} s"
    elif c.kind == "backward":
        if num.backward_s is None:
            return skip(num.backward_error or "the backward pass was not run", "NOT MET")
        value = num.backward_s
    else:
        den = got[1]
        assert den is not None and den.seconds is not None
        value = num.seconds / den.seconds
        detail = f"{_ms(num.seconds)} / {_ms(den.seconds)}"
        if den.job.impl == "FlexAttention compiled" and den.first_call_s is not None:
            detail += f"; FlexAttention compile {den.first_call_s:.1f} s, excluded"
    if not judged:
        return TargetResult(c, value, "QUICK", "tiny sizes: not judged", detail)
    met = value < c.bound if c.op == "<" else value <= c.bound
    if c.kind == "backward":
        met = True
    return TargetResult(c, value, "MET" if met else "NOT MET", "", detail)


def _ms(seconds: float) -> str:
    return milliseconds(seconds, 3)
