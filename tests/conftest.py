"""Shared pytest configuration for attnkit's unit tests."""

from __future__ import annotations

import pytest
from _chromium import browser  # noqa: F401 - headless Chromium, for the page's tests


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "install: builds and installs the package into a temporary directory "
        "(slower, about a few seconds; deselect with -m 'not install')",
    )
