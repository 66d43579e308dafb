import asyncio

import pytest

from streams.adapters import dns
from streams.execution.ssrf import TargetRefused, Vetted, check_addresses, internal, vet


def fixed(*addresses):
    async def resolve(host):
        return list(addresses)
    return resolve


def vetted(url, allow=(), resolve=None) -> Vetted:
    return asyncio.run(vet(url, allow, resolve or fixed("93.184.216.34")))


@pytest.mark.parametrize("address", ["127.0.0.1", "10.0.0.5", "172.16.3.4", "192.168.1.1",
                                     "169.254.169.254", "::1", "fe80::1", "0.0.0.0",
                                     "::ffff:127.0.0.1", "fc00::1", "224.0.0.1",
                                     # carrier-grade NAT passed the old blocklist (issue 40)
                                     "100.64.0.1", "100.127.255.254",
                                     # internal IPv4 addresses carried in IPv6 ones
                                     "64:ff9b::a00:1", "2002:a00:1::1",
                                     "2001:0:4136:e378:8000:63bf:3fff:fdd2",
                                     "192.0.2.10", "198.18.0.1", "240.0.0.1", "255.255.255.255"])
def test_addresses_that_are_not_globally_routable_are_refused(address):
    with pytest.raises(TargetRefused, match="allowed targets"):
        vetted("http://example.test/hook", resolve=fixed(address))


def test_public_address_passes_and_is_the_one_to_connect_to():
    assert vetted("https://example.test/hook").addresses == ("93.184.216.34",)
    assert not internal(__import__("ipaddress").ip_address("2606:4700::1111"))


def test_one_internal_address_among_many_is_enough_to_refuse():
    with pytest.raises(TargetRefused):
        vetted("https://example.test/", resolve=fixed("93.184.216.34", "10.0.0.1"))


@pytest.mark.parametrize("allow", [["127.0.0.1"], ["127.0.0.0/8"], ["example.test"]])
def test_allow_list(allow):
    assert vetted("http://example.test:8080/x", allow, fixed("127.0.0.1")).addresses == ("127.0.0.1",)


@pytest.mark.parametrize("url", ["ftp://example.test/x", "file:///etc/passwd", "http:///x",
                                 "http://[::1/x"])
def test_non_http_or_hostless_urls_are_refused(url):
    with pytest.raises(TargetRefused):
        vetted(url)


def test_the_host_is_resolved_once_and_its_answers_are_what_was_checked():
    asked = []

    async def rebinding(host):  # a public address first, loopback after
        asked.append(host)
        return ["93.184.216.34"] if len(asked) == 1 else ["127.0.0.1"]

    assert vetted("http://rebind.example/x", resolve=rebinding).addresses == ("93.184.216.34",)
    assert asked == ["rebind.example"]


@pytest.mark.parametrize(("transient", "fragment"), [(True, "within 2 s"), (False, "does not")])
def test_a_name_that_does_not_resolve_is_refused_and_says_whether_to_retry(transient, fragment):
    async def failing(host):
        raise dns.NotResolved(f"host {host!r} " + ("did not resolve within 2 s" if transient
                                                     else "does not resolve"), transient)

    with pytest.raises(TargetRefused, match=fragment) as refused:
        vetted("http://slow.example/x", resolve=failing)
    assert refused.value.transient is transient


def test_check_addresses_is_the_same_rule():
    check_addresses("h", ["8.8.8.8"])
    with pytest.raises(TargetRefused):
        check_addresses("h", ["8.8.8.8", "100.64.1.1"])
