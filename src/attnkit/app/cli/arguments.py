"""Argument types of the ``attnkit`` command line (argparse ``type=`` functions): each
raises ``argparse.ArgumentTypeError`` with the value received, so a bad argument exits
non-zero with a readable message."""

from __future__ import annotations

import argparse

__all__ = ["even_width", "lengths_arg", "non_negative_int", "positive_int"]


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def lengths_arg(text: str) -> tuple[int, ...]:
    lengths = tuple(positive_int(part.strip()) for part in text.split(",") if part.strip())
    if not lengths:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated positive integers, got {text!r}"
        )
    return lengths


def even_width(text: str) -> int:
    value = positive_int(text)
    if value % 2:
        raise argparse.ArgumentTypeError(
            f"expected an even window width (W/2 keys on each side), got {value}"
        )
    return value


def non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a non-negative integer, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a non-negative integer, got {value}")
    return value
