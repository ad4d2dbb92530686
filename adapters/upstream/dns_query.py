"""What to ask DNS for a pool's replicas: the query, apart from the resolver that
answers it (``adapters.upstream.dns``), so that naming a query costs no dnspython."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["DnsQuery"]


@dataclass(frozen=True, slots=True)
class DnsQuery:
    """What to resolve: ``name``'s ``record`` (``A`` or ``SRV``); for ``A``, the engines'
    ``port``. ``nameserver``: ``host`` or ``host:port`` (None: the system's)."""

    name: str
    record: str = "A"
    port: int = 8000
    scheme: str = "http"
    nameserver: str | None = None
    timeout_s: float = 1.0
