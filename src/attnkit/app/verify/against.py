"""``attnkit verify --against package.module:function``: the kit's check of someone's
attention function (:func:`attnkit.testing.check_attention`), printed as its report.

The options are the function's own (:func:`attnkit.testing.declare`) unless the command
line gives them (``--library``, ``--supports``, ``--dtypes``, ``--examples``). Exit
status 0 when every report is ok, 1 when one differs, 2 when a name or an option is bad
(the message says which and how to fix it).
"""

from __future__ import annotations

import argparse
import sys

from attnkit.errors import AttnkitError

__all__ = ["run"]


def run(args: argparse.Namespace) -> int:
    """Check each ``--against`` function; print each report."""
    from attnkit.testing.check import check_attention
    from attnkit.testing.target import load, options_from_strings

    options = options_from_strings(args.library, args.supports, args.examples, args.dtypes)
    status = 0
    for spec in args.against:
        try:
            report = check_attention(load(spec), raise_on_failure=False, **options)
        except AttnkitError as exc:
            print(f"error: {spec}: {exc}", file=sys.stderr)
            status = 2
            continue
        print(report, end="\n\n")
        if not report.ok and status == 0:
            status = 1
    return status
