import pytest

from streams.execution.ssrf import TargetRefused, check_url


def fixed(*addresses):
    return lambda host: list(addresses)


@pytest.mark.parametrize("address", ["127.0.0.1", "10.0.0.5", "172.16.3.4", "192.168.1.1",
                                     "169.254.169.254", "::1", "fe80::1", "0.0.0.0",
                                     "::ffff:127.0.0.1", "fc00::1", "224.0.0.1"])
def test_internal_addresses_are_refused(address):
    with pytest.raises(TargetRefused, match="allowed targets"):
        check_url("http://example.test/hook", resolver=fixed(address))


def test_public_address_passes():
    check_url("https://example.test/hook", resolver=fixed("93.184.216.34"))


def test_one_internal_address_among_many_is_enough_to_refuse():
    with pytest.raises(TargetRefused):
        check_url("https://example.test/", resolver=fixed("93.184.216.34", "10.0.0.1"))


@pytest.mark.parametrize("allow", [["127.0.0.1"], ["127.0.0.0/8"], ["example.test"]])
def test_allow_list(allow):
    check_url("http://example.test:8080/x", allow, resolver=fixed("127.0.0.1"))


@pytest.mark.parametrize("url", ["ftp://example.test/x", "file:///etc/passwd", "http:///x"])
def test_non_http_or_hostless_urls_are_refused(url):
    with pytest.raises(TargetRefused):
        check_url(url, resolver=fixed("93.184.216.34"))
