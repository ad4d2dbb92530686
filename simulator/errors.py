"""The simulator's error: a bad trace, fleet or option. Part of the one hierarchy.

SkyrouteError
└── SimulationError     the trace, the fleet or an option cannot be simulated
"""

from __future__ import annotations

from base.errors import SkyrouteError


class SimulationError(SkyrouteError):
    """The trace, the fleet or an option cannot be simulated; the message says why."""
