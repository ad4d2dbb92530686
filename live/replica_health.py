"""Replica ejections shared between gateway processes: the values of ``pool:{id}:ejections``.

A gateway that ejects a replica for failed requests (``gateway.replicas``) publishes it
in its next periodic flush; every gateway's next snapshot then carries it in
``PoolRow.ejected``, and leaves that replica out until the ejection is over. Times are
unix seconds, so processes with different monotonic clocks agree.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["ReplicaEjection", "parse_ejections"]


@dataclass(frozen=True, slots=True)
class ReplicaEjection:
    """Replica ``address`` (base URL) of ``pool_id`` is out until ``until_s`` (unix s)."""

    pool_id: str
    address: str
    until_s: float
    reason: str = ""

    def field_value(self) -> str:
        """The hash field's value: ``"<until unix ms> <reason>"``."""
        return f"{int(self.until_s * 1000)} {self.reason}"


def parse_ejections(raw: Mapping[str, str]) -> dict[str, tuple[float, str]]:
    """``{address: (until unix s, reason)}`` from a pool's ejections hash; malformed
    values are left out (they eject nothing)."""
    out: dict[str, tuple[float, str]] = {}
    for address, value in raw.items():
        until, _, reason = value.partition(" ")
        try:
            out[address] = (int(until) / 1000.0, reason)
        except ValueError:
            continue
    return out
