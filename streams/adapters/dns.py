"""Host names to addresses without blocking the event loop, within a short timeout.

Why not ``socket.getaddrinfo`` (what the SSRF check and aiohttp used): it blocks its thread for
as long as the name server takes, up to glibc's 5 s per try, and it ran on the event loop of
the API (each job create) and of the executor (each fire): a tenant whose webhook host's name
server never answers froze every other tenant's requests and runs on that process (issue 40).
A thread pool only moves the problem (one tenant fills it). Here the questions are asked over
asyncio (dnspython's async resolver, the name servers of ``/etc/resolv.conf``), both address
families at once, and given up after ``timeout_s``.

``/etc/hosts`` is read first, as the C library's ``files dns`` order does, so ``localhost``
and the machine's own names resolve as they did. Addresses come back as text, each once, in
the order found; the caller decides what may be reached (``streams.execution.ssrf``).
"""

from __future__ import annotations

import asyncio
import ipaddress
from pathlib import Path

import dns.asyncresolver
import dns.exception
import dns.resolver

HOSTS = Path("/etc/hosts")
DEFAULT_TIMEOUT_S = 2.0


class NotResolved(Exception):
    """A name with no address: ``transient`` when the name servers did not answer in time
    (worth asking again later), else the name does not exist or has no address."""

    def __init__(self, message: str, transient: bool) -> None:
        super().__init__(message)
        self.transient = transient


def read_hosts(text: str) -> dict[str, list[str]]:
    """The names of a hosts file and their addresses, in file order (lower-cased names)."""
    found: dict[str, list[str]] = {}
    for line in text.splitlines():
        fields = line.split("#", 1)[0].split()
        if len(fields) < 2:
            continue
        try:
            address = str(ipaddress.ip_address(fields[0].split("%", 1)[0]))
        except ValueError:
            continue
        for name in fields[1:]:
            listed = found.setdefault(name.lower().rstrip("."), [])
            if address not in listed:
                listed.append(address)
    return found


def literal(host: str) -> str | None:
    """``host`` as an address if it is one (an IPv6 zone is dropped), else None."""
    try:
        return str(ipaddress.ip_address(host.strip("[]").split("%", 1)[0]))
    except ValueError:
        return None


def _system_resolver() -> dns.asyncresolver.Resolver:
    """The name servers ``/etc/resolv.conf`` lists; none (a file without any) means every
    name outside the hosts file is unresolvable, said so at each lookup, not at start."""
    try:
        return dns.asyncresolver.Resolver()
    except dns.resolver.NoResolverConfiguration:
        return dns.asyncresolver.Resolver(configure=False)


class Resolver:
    """Asks the system's name servers over asyncio; one instance per process is enough."""

    def __init__(self, timeout_s: float = DEFAULT_TIMEOUT_S, hosts: Path | None = HOSTS,
                 resolver: dns.asyncresolver.Resolver | None = None) -> None:
        """``resolver``: dnspython's, e.g. pointed at a test's name server; by default the
        one ``/etc/resolv.conf`` describes (read once, here)."""
        self.timeout_s = timeout_s
        self._dns = resolver or _system_resolver()
        self._hosts: dict[str, list[str]] = {}
        if hosts is not None:
            try:
                self._hosts = read_hosts(hosts.read_text(errors="replace"))
            except OSError:
                self._hosts = {}

    async def resolve(self, host: str) -> list[str]:
        """Every address of ``host`` (IPv4 then IPv6), or NotResolved saying why."""
        address = literal(host)
        if address is not None:
            return [address]
        name = host.lower().rstrip(".")
        if name in self._hosts:
            return list(self._hosts[name])
        try:
            answers = await asyncio.wait_for(asyncio.gather(
                self._ask(name, "A"), self._ask(name, "AAAA"), return_exceptions=True),
                self.timeout_s)
        except TimeoutError as exc:
            raise NotResolved(f"host {host!r} did not resolve within {self.timeout_s:g} s",
                              transient=True) from exc
        found = [a for answer in answers if isinstance(answer, list) for a in answer]
        if found:
            return list(dict.fromkeys(found))
        if any(isinstance(a, dns.exception.Timeout | dns.resolver.NoNameservers)
               for a in answers):
            raise NotResolved(f"host {host!r} did not resolve: its name servers did not answer",
                              transient=True)
        raise NotResolved(f"host {host!r} does not resolve", transient=False)

    async def _ask(self, name: str, rdtype: str) -> list[str]:
        answer = await self._dns.resolve(name, rdtype, search=False, raise_on_no_answer=False,
                                         lifetime=self.timeout_s)
        return [rdata.address for rdata in answer] if answer.rrset is not None else []
