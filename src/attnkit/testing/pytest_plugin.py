"""The pytest plugin: ``pytest --attnkit-check package.module:function`` adds one test per
function named, which runs :func:`attnkit.testing.check_attention` and fails with the
report. Installed as the ``pytest11`` entry point ``attnkit``; inert without
``--attnkit-check``. Options: ``--attnkit-library``, ``--attnkit-supports a,b``,
``--attnkit-dtypes``, ``--attnkit-examples`` (else the function's :func:`declare`).
"""

from __future__ import annotations

from typing import Any

import pytest

__all__ = ["CheckItem"]


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("attnkit", "check an attention function against attnkit's oracle")
    group.addoption(
        "--attnkit-check",
        action="append",
        default=[],
        metavar="MODULE:FUNCTION",
        help="run attnkit.testing.check_attention on this function (repeatable)",
    )
    group.addoption("--attnkit-library", default=None, help="numpy, torch, jax, array_api_strict")
    group.addoption(
        "--attnkit-supports", default=None, help="keyword arguments it takes, comma-separated"
    )
    group.addoption("--attnkit-dtypes", default=None, help="dtypes to check, comma-separated")
    group.addoption("--attnkit-examples", type=int, default=None, help="fuzzer calls")


class CheckItem(pytest.Item):
    """One ``--attnkit-check`` target."""

    def __init__(self, *, spec: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.spec = spec

    def runtest(self) -> None:
        from .check import check_attention
        from .target import load, options_from_strings

        config = self.config
        options = options_from_strings(
            config.getoption("attnkit_library"),
            config.getoption("attnkit_supports"),
            config.getoption("attnkit_examples"),
            config.getoption("attnkit_dtypes"),
        )
        report = check_attention(load(self.spec), raise_on_failure=False, **options)
        self.add_report_section("call", "attnkit report", str(report))
        report.raise_if_differs()

    def repr_failure(self, excinfo: Any, style: Any = None) -> Any:
        from ..errors import AttnkitError
        from .report import AttentionCheckError

        if isinstance(excinfo.value, AttentionCheckError | AttnkitError):
            return str(excinfo.value)
        return super().repr_failure(excinfo)

    def reportinfo(self) -> tuple[Any, int | None, str]:
        return self.path, None, f"attnkit check of {self.spec}"


def pytest_collection_modifyitems(
    session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
) -> None:
    for spec in config.getoption("attnkit_check"):
        items.append(CheckItem.from_parent(session, name=f"attnkit-check[{spec}]", spec=spec))
