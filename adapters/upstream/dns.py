"""A pool's replicas from DNS: A/AAAA or SRV records turned into engine base URLs.

The resolver is dnspython's asyncio one (no thread, no blocking call): the system's
resolvers from ``/etc/resolv.conf`` unless a ``nameserver`` is given. An answer that
names nothing (NXDOMAIN, no records of the type) is an empty list: every replica left.
No answer at all (timeout, every server failing) raises ``DiscoveryError``, so the
caller keeps the replicas it had rather than dropping them on a DNS hiccup.
"""

from __future__ import annotations

import dns.asyncresolver
import dns.exception
import dns.rdatatype
import dns.resolver

from adapters.upstream.dns_query import DnsQuery
from base.errors import DiscoveryError

__all__ = ["resolve_replicas"]

_DEFAULT_DNS_PORT = 53


def _resolver(query: DnsQuery) -> dns.asyncresolver.Resolver:
    if query.nameserver is None:
        resolver = dns.asyncresolver.Resolver()
    else:
        host, port = _host_port(query.nameserver)
        resolver = dns.asyncresolver.Resolver(configure=False)
        resolver.nameservers = [host]
        resolver.port = port
    resolver.lifetime = query.timeout_s
    resolver.timeout = query.timeout_s
    return resolver


def _host_port(server: str) -> tuple[str, int]:
    """``host``, ``host:port``, ``v6`` or ``[v6]:port``."""
    if server.startswith("["):
        host, _, rest = server[1:].partition("]")
        return host, int(rest[1:]) if rest.startswith(":") else _DEFAULT_DNS_PORT
    if server.count(":") == 1:
        host, _, port = server.partition(":")
        return host, int(port)
    return server, _DEFAULT_DNS_PORT


def _url(scheme: str, address: str, port: int) -> str:
    host = f"[{address}]" if ":" in address else address
    return f"{scheme}://{host}:{port}"


async def _addresses(resolver: dns.asyncresolver.Resolver, name: str) -> list[str]:
    """A and AAAA addresses of ``name`` (empty when it has none)."""
    out: list[str] = []
    for rdtype in (dns.rdatatype.A, dns.rdatatype.AAAA):
        try:
            answer = await resolver.resolve(name, rdtype, search=False)
        except (dns.resolver.NXDOMAIN, dns.resolver.NoAnswer):
            continue
        out.extend(str(rr.address) for rr in answer)
    return out


async def resolve_replicas(query: DnsQuery) -> list[str]:
    """The replicas' base URLs (sorted, without duplicates) ``query`` names now.
    Raises DiscoveryError when no DNS server answered."""
    resolver = _resolver(query)
    try:
        if query.record == "SRV":
            urls = await _srv(resolver, query)
        else:
            urls = [
                _url(query.scheme, a, query.port) for a in await _addresses(resolver, query.name)
            ]
    except (dns.resolver.NXDOMAIN, dns.resolver.NoAnswer):
        return []
    except dns.exception.DNSException as exc:
        raise DiscoveryError(f"DNS {query.record} {query.name}: {exc}") from exc
    return sorted(set(urls))


async def _srv(resolver: dns.asyncresolver.Resolver, query: DnsQuery) -> list[str]:
    answer = await resolver.resolve(query.name, dns.rdatatype.SRV, search=False)
    # Servers (CoreDNS among them) send the targets' addresses along: use them, and
    # ask only for the targets they left out.
    glue: dict[str, list[str]] = {}
    for rrset in answer.response.additional:
        if rrset.rdtype in (dns.rdatatype.A, dns.rdatatype.AAAA):
            glue.setdefault(rrset.name.to_text(), []).extend(str(rr.address) for rr in rrset)
    urls: list[str] = []
    for rr in answer:
        target = rr.target.to_text()
        addresses = glue.get(target)
        if addresses is None:
            addresses = await _addresses(resolver, target)
        urls.extend(_url(query.scheme, a, int(rr.port)) for a in addresses)
    return urls
