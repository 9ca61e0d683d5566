"""The application's NumPy half: the golden vectors of ``attnkit verify`` read and
measured (:mod:`.golden`), put in a framework's layout (:mod:`.golden_layout`), and
NumPy's own attention for ``attnkit bench`` (:mod:`.peers`).

The rest of :mod:`attnkit.app` reaches NumPy only through here and the backends; this
package imports no other framework and no other framework package of the application.
"""

from __future__ import annotations

__all__: list[str] = []
