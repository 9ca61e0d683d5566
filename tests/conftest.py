"""Shared pytest configuration for attnkit's unit tests."""

from __future__ import annotations

import os
import tempfile
from importlib import metadata

import pytest
from _chromium import browser  # noqa: F401 - headless Chromium, for the page's tests

# hypothesis (the distributed fuzzers) keeps its working files in the temporary
# directory, not in a .hypothesis folder in the checkout (as conformance/conftest.py)
os.environ.setdefault(
    "HYPOTHESIS_STORAGE_DIRECTORY", os.path.join(tempfile.gettempdir(), "attnkit-hypothesis")
)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "install: builds and installs the package into a temporary directory "
        "(slower, about a few seconds; deselect with -m 'not install')",
    )


#: The third-party releases whose behaviour the unit tests depend on most.
REPORTED = ("torch", "jax", "numpy", "array-api-compat", "transformers", "flax", "keras")


def pytest_report_header(config: pytest.Config) -> str:
    """The installed releases of :data:`REPORTED` (tests/constraints.txt pins them)."""
    versions = []
    for name in REPORTED:
        try:
            versions.append(f"{name} {metadata.version(name)}")
        except metadata.PackageNotFoundError:
            versions.append(f"{name} absent")
    return "attnkit tests against: " + ", ".join(versions)
