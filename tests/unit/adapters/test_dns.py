"""Host names resolved over asyncio within a timeout (streams.adapters.dns), against a name
server on loopback that the test controls (tests/dns_server.py)."""

from __future__ import annotations

import asyncio

import dns.asyncresolver
import pytest

from streams.adapters.dns import NotResolved, Resolver, literal, read_hosts
from tests.dns_server import NXDOMAIN, SILENT, DnsServer
from tests.waiting import wait_for

NAMES = {("both.test", "A"): ["192.0.2.1"], ("both.test", "AAAA"): ["2001:db8::1"],
         ("v4.test", "A"): ["192.0.2.2"], ("v4.test", "AAAA"): []}


def answer(name, rdtype, count):
    if name == "hang.test":
        return SILENT
    return NAMES.get((name, rdtype), NXDOMAIN)


@pytest.fixture
def server():
    s = DnsServer("127.0.0.1", answer, port=0)
    yield s
    s.close()


def resolver(server, tmp_path, timeout_s=2.0, hosts="127.0.0.1 localhost\n"):
    path = tmp_path / "hosts"
    path.write_text(hosts)
    asker = dns.asyncresolver.Resolver(configure=False)
    asker.nameservers, asker.port = [server.address], server.port
    return Resolver(timeout_s, path, asker)


def test_both_families_are_asked_and_every_address_returned(server, tmp_path):
    r = resolver(server, tmp_path)
    assert asyncio.run(r.resolve("both.test")) == ["192.0.2.1", "2001:db8::1"]
    assert asyncio.run(r.resolve("V4.test.")) == ["192.0.2.2"]


def test_a_name_server_that_never_answers_is_given_up_on_after_the_timeout(server, tmp_path):
    r = resolver(server, tmp_path, timeout_s=0.3)

    async def lookup_while_the_loop_runs():
        ticks = 0

        async def tick():
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0.01)

        ticker = asyncio.create_task(tick())
        try:
            with pytest.raises(NotResolved) as failed:
                await r.resolve("hang.test")
        finally:
            ticker.cancel()
        return failed.value, ticks

    failed, ticks = asyncio.run(lookup_while_the_loop_runs())
    assert failed.transient and "within 0.3 s" in str(failed)
    assert ticks > 1, "the event loop ran other tasks while the name was being asked"
    wait_for(lambda: server.asked("hang.test"), timeout_s=5)


def test_a_name_that_does_not_exist_is_not_worth_asking_again(server, tmp_path):
    with pytest.raises(NotResolved) as failed:
        asyncio.run(resolver(server, tmp_path).resolve("nowhere.test"))
    assert not failed.value.transient and "does not resolve" in str(failed.value)


def test_the_hosts_file_and_literals_are_answered_without_asking(server, tmp_path):
    r = resolver(server, tmp_path, hosts="# comment\n127.0.0.1 localhost me.local\n::1 localhost\n")
    assert asyncio.run(r.resolve("LOCALHOST")) == ["127.0.0.1", "::1"]
    assert asyncio.run(r.resolve("[::1]")) == ["::1"]
    assert asyncio.run(r.resolve("10.1.2.3")) == ["10.1.2.3"]
    assert server.log == []


def test_hosts_file_parsing():
    assert read_hosts("10.0.0.1 a b # c\nbad line\nnot-an-ip x\n10.0.0.2 a\n") == {
        "a": ["10.0.0.1", "10.0.0.2"], "b": ["10.0.0.1"]}
    assert literal("fe80::1%eth0") == "fe80::1" and literal("example.test") is None
