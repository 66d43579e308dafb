"""Webhook targets may reach only globally routable addresses, unless the tenant allows more.

A URL is refused when any address its host resolves to is not globally routable (Python's
``ipaddress`` ``is_global``: loopback, private, link-local, carrier-grade NAT 100.64.0.0/10,
multicast, reserved, documentation ranges...; an IPv4 address embedded in an IPv6 one, mapped,
6to4, Teredo or NAT64, is judged as itself), unless the host or that address is on the tenant's
allow-list (host names, IPs or CIDRs).

The check and the connection must be about the same addresses. ``vet`` resolves the host once
and returns every address it checked; the webhook call connects to one of those, never to what
a second lookup says (``streams.execution.targets``). Before, the check resolved the name and
aiohttp resolved it again to connect: a name answering a public address first and 127.0.0.1
next reached internal services with the tenant's method, headers and body (DNS rebinding,
issue 40). The API vets at creation, the executor at every call (DNS changes), and redirects are
never followed, so a redirect cannot lead to a refused address either.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

from streams.adapters import dns

Resolve = Callable[[str], Awaitable[list[str]]]  # a host's addresses (``dns.Resolver.resolve``)
Address = ipaddress.IPv4Address | ipaddress.IPv6Address
NAT64 = ipaddress.ip_network("64:ff9b::/96")


class TargetRefused(ValueError):
    """The URL may not be called: by policy, or its host has no address (``transient``: the
    name servers did not answer in time, so a later attempt may succeed)."""

    def __init__(self, message: str, transient: bool = False) -> None:
        super().__init__(message)
        self.transient = transient


@dataclass(frozen=True)
class Vetted:
    """A URL whose every address was checked: connect to ``addresses`` only."""

    url: str
    host: str
    addresses: tuple[str, ...]


def _embedded(ip: Address) -> list[Address]:
    """The address and any IPv4 address it carries (mapped, 6to4, Teredo, NAT64)."""
    found: list[Address] = [ip]
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            found.append(ip.ipv4_mapped)
        if ip.sixtofour is not None:
            found.append(ip.sixtofour)
        if ip.teredo is not None:
            found.extend(ip.teredo)
        if ip in NAT64:
            found.append(ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF))
    return found


def internal(ip: Address) -> bool:
    """Not globally routable, itself or through an IPv4 address it embeds."""
    return any(not part.is_global or part.is_multicast for part in _embedded(ip))


def _allowed(host: str, ip: Address, allow: Iterable[str]) -> bool:
    for entry in allow:
        if entry.lower() == host.lower():
            return True
        try:
            if ip in ipaddress.ip_network(entry, strict=False):
                return True
        except ValueError:
            continue
    return False


def url_host(url: str) -> str:
    """The URL's host, or TargetRefused for a URL that is not http(s) or has none."""
    try:
        parts = urlsplit(url)
        host = parts.hostname
    except ValueError as exc:
        raise TargetRefused(f"not a URL: {exc}") from exc
    if parts.scheme not in ("http", "https"):
        raise TargetRefused(f"scheme {parts.scheme!r} is not http or https")
    if not host:
        raise TargetRefused("URL has no host")
    return host


def check_addresses(host: str, addresses: Iterable[str], allow: Iterable[str] = ()) -> None:
    """TargetRefused unless every address is globally routable or allowed (pure)."""
    allow = list(allow)
    for address in addresses:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
        if internal(ip) and not _allowed(host, ip, allow):
            raise TargetRefused(
                f"{host} resolves to {ip}, which is not a globally routable address (loopback, "
                "private, link-local, shared or reserved); ask for it to be added to the "
                "tenant's allowed targets")


async def vet(url: str, allow: Iterable[str], resolve: Resolve) -> Vetted:
    """Resolve ``url``'s host once and check every address; the addresses to connect to."""
    host = url_host(url)
    try:
        addresses = await resolve(host)
    except dns.NotResolved as exc:
        raise TargetRefused(str(exc), transient=exc.transient) from exc
    if not addresses:
        raise TargetRefused(f"host {host!r} does not resolve")
    check_addresses(host, addresses, allow)
    return Vetted(url, host, tuple(addresses))
