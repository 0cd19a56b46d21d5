"""The address and host rules of an action's request, without a network: every forbidden range and
its IPv6 wrappings, numeric host forms, declared hosts matched after IDNA and per port."""

from __future__ import annotations

import ipaddress

import pytest

from services.actions.network import HostRules, Refused, Target, address_problem, check_addresses, host_problem
from services.actions.request import HostRule

FORBIDDEN = [
    ("127.0.0.1", "loopback"),
    ("127.255.0.9", "loopback"),
    ("10.1.2.3", "private"),
    ("172.16.0.1", "private"),
    ("192.168.1.1", "private"),
    ("169.254.169.254", "metadata"),
    ("169.254.1.1", "link-local"),
    ("100.64.0.1", "CGNAT"),
    ("0.0.0.0", "unspecified"),
    ("0.1.2.3", "unspecified"),
    ("224.0.0.1", "multicast"),
    ("240.0.0.1", "reserved"),
    ("255.255.255.255", "reserved"),
    ("198.18.0.1", "benchmarking"),
    ("192.0.2.1", "documentation"),
    ("::1", "loopback"),
    ("::", "unspecified"),
    ("fc00::1", "private"),
    ("fd00:ec2::254", "metadata"),
    ("fe80::1", "link-local"),
    ("ff02::1", "multicast"),
    ("2001:db8::1", "documentation"),
    ("2001:2::1", "IETF"),
    ("::ffff:127.0.0.1", "IPv4-mapped form of 127.0.0.1: loopback"),
    ("::ffff:169.254.169.254", "metadata"),
    ("::ffff:10.0.0.1", "IPv4-mapped form of 10.0.0.1: private"),
    ("::127.0.0.1", "IPv4-compatible form of 127.0.0.1"),
    ("64:ff9b::7f00:1", "NAT64 form of 127.0.0.1"),
    ("64:ff9b:1::a9fe:a9fe", "local-use NAT64"),
    ("64:ff9b:1:7f00:1::", "local-use NAT64"),  # 127.0.0.1 embedded after a /48 prefix
    ("64:ff9b:1::808:808", "local-use NAT64"),  # not 8.8.8.8: its IPv4 address cannot be told
    ("2002:7f00:1::", "6to4 form of 127.0.0.1"),
    ("2002:a9fe:a9fe::", "metadata"),
    ("2001:0:4136:e378:8000:63bf:80ff:fffe", "Teredo form of 127.0.0.1"),
    ("::ffff:8.8.8.8", None),
    ("8.8.8.8", None),
    ("2606:4700::1111", None),
    ("64:ff9b::808:808", None),
]


@pytest.mark.parametrize(("text", "expected"), FORBIDDEN)
def test_every_forbidden_range_and_wrapping_is_named(text: str, expected: str | None) -> None:
    problem = address_problem(ipaddress.ip_address(text), private=False)
    if expected is None:
        assert problem is None
    else:
        assert problem is not None and expected in problem


@pytest.mark.parametrize("text", ["127.0.0.1", "10.0.0.12", "fd12::1", "::ffff:192.168.0.1", "100.64.0.1", "fe80::1"])
def test_private_allows_internal_unicast(text: str) -> None:
    assert address_problem(ipaddress.ip_address(text), private=True) is None


@pytest.mark.parametrize(
    "text",
    [
        "169.254.169.254", "fd00:ec2::254", "::ffff:169.254.169.254", "0.0.0.0", "::", "224.0.0.1", "ff02::1",
        "64:ff9b:1:a9fe:a9:fe00::",
    ],
)  # fmt: skip
def test_private_never_allows_metadata_unspecified_or_multicast(text: str) -> None:
    assert address_problem(ipaddress.ip_address(text), private=True) is not None


@pytest.mark.parametrize("host", ["2130706433", "0177.0.0.1", "127.1", "0x7f.0.0.1", "0x7f000001", "", "a..b"])
def test_non_canonical_numbers_and_broken_names_cannot_be_declared(host: str) -> None:
    assert host_problem(host) is not None
    with pytest.raises(ValueError, match="hosts:"):
        HostRules([HostRule(host)])


@pytest.mark.parametrize("host", ["shop.example.com", "Shöp.Example", "10.0.0.12", "[fd00::1]", "::1", "localhost"])
def test_names_and_canonical_addresses_can_be_declared(host: str) -> None:
    assert host_problem(host) is None


def test_names_match_in_any_case_after_idna() -> None:
    rules = HostRules([HostRule("Shöp.Example")])
    for url in ("https://xn--shp-tna.example/a", "https://SHÖP.example/a", "https://shöp.example./a"):
        target = rules.target(url)
        assert (target.host, target.port, target.private) == ("xn--shp-tna.example", 443, False)
        assert target.url.raw_host == "xn--shp-tna.example"


def test_ports_and_schemes() -> None:
    rules = HostRules([HostRule("shop.example.com"), HostRule("10.0.0.12", 8080, private=True)])
    assert rules.target("https://shop.example.com:443/x").port == 443
    assert rules.target("http://10.0.0.12:8080/x").private
    for url, why in [
        ("https://shop.example.com:8443/x", "not a declared host"),
        ("http://shop.example.com/x", "plain http"),  # the rule has the scheme's port, but https only
        ("ftp://shop.example.com/x", "only https"),
        ("https://10.0.0.12/x", "not a declared host"),
        ("https://evil.example/x", "not a declared host"),
        ("https://shop.example.com.evil.example/x", "not a declared host"),
    ]:
        with pytest.raises(Refused, match=why):
            rules.target(url)


def test_plain_http_only_for_private_hosts() -> None:
    rules = HostRules([HostRule("shop.example.com", 80)])
    with pytest.raises(Refused, match="plain http"):
        rules.target("http://shop.example.com/x")


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("https://user:secret@shop.example.com/x", "credentials"),
        ("https://shop.example.com%2F@evil.example/x", "credentials"),
        ("https://shop.example.com/a b", "spaces"),
        ("https://shop.example.com/a\r\nHost: x", "control"),
        ("https://shop.example.com\\@evil.example/", "backslash"),
        ("https://shop.example.com/api/../admin", "dot segment"),
        ("https://shop.example.com/api/%2e%2E/admin", "dot segment"),
        ("https://shop.example.com/api/..%2Fadmin", "dot segment"),
        ("https://shop.example.com/api/é", "percent-encoded"),
        ("https://2130706433/", "non-canonical"),
        ("https://[::1/", "not valid"),
    ],
)
def test_hostile_urls_are_refused(url: str, why: str) -> None:
    with pytest.raises(Refused, match=why):
        HostRules([HostRule("shop.example.com")]).target(url)


def test_the_rendered_path_and_query_are_sent_untouched() -> None:
    target = HostRules([HostRule("shop.example.com")]).target("https://SHOP.example.com/a%2Fb/%41?q=%26x&y=1#frag")
    assert str(target.url) == "https://shop.example.com/a%2Fb/%41?q=%26x&y=1"


def test_a_mix_of_good_and_bad_answers_is_refused() -> None:
    target = Target(HostRules([HostRule("shop.test")]).target("https://shop.test/").url, "shop.test", 443, None, False)
    assert check_addresses(target, ["8.8.8.8", "2606:4700::1111", "8.8.8.8"]) == ("8.8.8.8", "2606:4700::1111")
    for answers in (["8.8.8.8", "127.0.0.1"], ["127.0.0.1", "8.8.8.8"], [], ["not-an-address"]):
        with pytest.raises(Refused):
            check_addresses(target, answers)
