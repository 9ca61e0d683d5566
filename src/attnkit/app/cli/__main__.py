"""``python -m attnkit.app.cli``: the ``attnkit`` command."""

from __future__ import annotations

import sys

from . import main

sys.exit(main())
