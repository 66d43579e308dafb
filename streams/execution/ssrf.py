"""Webhook targets may not reach the service's own network unless the tenant allows it.

A URL is refused when any address its host resolves to is loopback, private, link-local,
multicast, reserved or unspecified, unless the host or one of those addresses is on the
tenant's allow-list (host names, IPs or CIDRs). The executor checks again at call time (DNS can
change) and never follows redirects, so a redirect cannot lead to a refused address either.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable, Iterable
from urllib.parse import urlsplit

Resolver = Callable[[str], list[str]]


class TargetRefused(ValueError):
    pass


def resolve(host: str) -> list[str]:
    try:
        infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
    except socket.gaierror as exc:
        raise TargetRefused(f"host {host!r} does not resolve: {exc.strerror}") from exc
    return sorted({str(info[4][0]) for info in infos})


def _internal(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return (ip.is_loopback or ip.is_private or ip.is_link_local or ip.is_multicast
            or ip.is_reserved or ip.is_unspecified)


def _allowed(host: str, ip: ipaddress.IPv4Address | ipaddress.IPv6Address,
             allow: Iterable[str]) -> bool:
    for entry in allow:
        if entry.lower() == host.lower():
            return True
        try:
            if ip in ipaddress.ip_network(entry, strict=False):
                return True
        except ValueError:
            continue
    return False


def check_url(url: str, allow: Iterable[str] = (), resolver: Resolver = resolve) -> None:
    """Raise TargetRefused unless ``url`` is http(s) and every address it reaches is allowed."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https"):
        raise TargetRefused(f"scheme {parts.scheme!r} is not http or https")
    host = parts.hostname
    if not host:
        raise TargetRefused("URL has no host")
    vet(host, resolver(host), allow)


def vet(host: str, addresses: Iterable[str], allow: Iterable[str] = ()) -> None:
    """Raise TargetRefused unless every address ``host`` resolved to may be reached: the
    webhook client connects to one of exactly these (``webhook_client.WebhookClient.vetted``)."""
    allow = list(allow)
    found = False
    for address in addresses:
        found = True
        ip = ipaddress.ip_address(address.split("%", 1)[0])
        if _internal(ip) and not _allowed(host, ip, allow):
            raise TargetRefused(
                f"{host} resolves to {ip}, a loopback/private/link-local address; ask for it to "
                "be added to the tenant's allowed targets")
    if not found:
        raise TargetRefused(f"host {host!r} resolves to no address")
