"""Where an action's request may go: the URL read as aiohttp reads it (yarl), its host and port matched
against the declared HostRules (names after IDNA, any case; addresses as declared), every address
the host resolves to judged with ``ipaddress`` (loopback, private, link-local and cloud metadata,
CGNAT, multicast, reserved..., IPv6 wrappings of IPv4 unwrapped) and the system resolver. A failed
check raises ``Refused`` before any packet is sent."""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from urllib.parse import unquote

from yarl import URL

from services.actions.request import HostRule

Resolve = Callable[[str, int], Awaitable[list[str]]]
"""``async (host, port) -> addresses``: the one lookup of a request (tests inject their own)."""

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
DEFAULT_PORTS = {"https": 443, "http": 80}


class Refused(Exception):
    """The request is not sent; the message says why (no header, no secret: the host at most)."""


def _table(*rows: tuple[str, str]) -> tuple[tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, str], ...]:
    return tuple((ipaddress.ip_network(net), label) for net, label in rows)


_V4 = _table(
    ("0.0.0.0/8", "unspecified"),
    ("10.0.0.0/8", "private"),
    ("100.64.0.0/10", "shared address space (CGNAT)"),
    ("127.0.0.0/8", "loopback"),
    ("169.254.0.0/16", "link-local (cloud metadata)"),
    ("172.16.0.0/12", "private"),
    ("192.0.0.0/24", "IETF protocol assignments"),
    ("192.0.2.0/24", "documentation"),
    ("192.88.99.0/24", "6to4 relay anycast"),
    ("192.168.0.0/16", "private"),
    ("198.18.0.0/15", "benchmarking"),
    ("198.51.100.0/24", "documentation"),
    ("203.0.113.0/24", "documentation"),
    ("224.0.0.0/4", "multicast"),
    ("240.0.0.0/4", "reserved"),
)
_NAT64_LOCAL = "a local-use NAT64 address (64:ff9b:1::/48), whose IPv4 address cannot be told"
"""RFC 8215: the IPv4 address sits where the local prefix length puts it (not known here): refused."""
_V6 = _table(
    ("::/128", "unspecified"),
    ("::1/128", "loopback"),
    ("100::/64", "discard-only"),
    ("2001::/23", "IETF protocol assignments"),
    ("2001:db8::/32", "documentation"),
    ("3fff::/20", "documentation"),
    ("fc00::/7", "private (unique local)"),
    ("fe80::/10", "link-local"),
    ("fec0::/10", "site-local"),
    ("ff00::/8", "multicast"),
    ("64:ff9b:1::/48", _NAT64_LOCAL),
)
_NAT64 = _table(("64:ff9b::/96", "NAT64"))
"""The well-known NAT64 prefix: the IPv4 address is the low 32 bits (RFC 6052)."""
_COMPATIBLE = ipaddress.ip_network("::/96")
_NEVER_LABELS = {"unspecified", "multicast", "reserved", _NAT64_LOCAL}
_METADATA = frozenset(
    ipaddress.ip_address(text)
    for text in (
        "169.254.169.254",
        "169.254.170.2",
        "169.254.170.23",
        "100.100.100.200",
        "fd00:ec2::254",
        "fd00:ec2::23",
    )
)
"""Cloud metadata and credential endpoints (AWS, ECS, EKS, Alibaba): refused even for ``private: true``."""


def _label(ip: IPAddress) -> str | None:
    for network, label in _V4 if ip.version == 4 else _V6:
        if ip in network:
            return label
    if ip.is_reserved or not ip.is_global:
        return "not a public address"
    return None


def _embedded(ip: ipaddress.IPv6Address) -> tuple[str, ipaddress.IPv4Address] | None:
    """The IPv4 address an IPv6 address carries, and the form: mapped, NAT64, 6to4, Teredo, compatible."""
    low = ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    if ip.ipv4_mapped is not None:
        return "IPv4-mapped", ip.ipv4_mapped
    if any(ip in network for network, _ in _NAT64):
        return "NAT64", low
    if ip.sixtofour is not None:
        return "6to4", ip.sixtofour
    if ip.teredo is not None:
        return "Teredo", ip.teredo[1]
    if ip in _COMPATIBLE and int(ip) > 1:
        return "IPv4-compatible", low
    return None


def address_problem(ip: IPAddress, *, private: bool) -> str | None:
    """Why a connection to ``ip`` is not allowed (None: it is). ``private`` (the host's rule says
    ``private: true``) allows private, loopback and link-local addresses, never the cloud metadata
    endpoints nor an unspecified, multicast or reserved address."""
    if ip in _METADATA:
        return f"{ip} is a cloud metadata address"
    wrapped = _embedded(ip) if isinstance(ip, ipaddress.IPv6Address) else None
    if wrapped is not None:
        form, inner = wrapped
        problem = address_problem(inner, private=private)
        if problem is not None:
            return f"{ip} is the {form} form of {inner}: {problem.removeprefix(f'{inner} is ')}"
        if form in ("IPv4-mapped", "NAT64"):
            return None  # the connection goes to the public IPv4 address it carries
    label = _label(ip)
    if label is None or (private and label not in _NEVER_LABELS):
        return None
    return f"{ip} is {label}"


def host_problem(host: str) -> str | None:
    """Why ``host`` (as a hosts: entry writes it, without the port) cannot be declared; None: it can."""
    try:
        _host_key(host.removeprefix("[").removesuffix("]"))
    except Refused as refusal:
        return str(refusal)
    return None


def _host_key(host: str) -> tuple[str, IPAddress | None]:
    """The host as compared and connected to: an address in its canonical text, a name in IDNA
    lower case without the final dot. Numeric hosts in other forms (2130706433, 0177.0.0.1, 127.1)
    are refused: resolvers read them as addresses, the rules would not."""
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        pass
    else:
        return str(ip), ip
    if _legacy_ipv4(host):
        raise Refused(f"{host} is an address in a non-canonical form (write it as a.b.c.d)")
    try:
        name = URL.build(scheme="https", host=host).raw_host or ""
    except (ValueError, UnicodeError):
        raise Refused("the host is not a valid name") from None
    name = name.rstrip(".").lower()
    if not name or any(not label for label in name.split(".")):
        raise Refused("the host is not a valid name")
    return name, None


def _legacy_ipv4(host: str) -> bool:
    try:
        socket.inet_aton(host.rstrip("."))
    except (OSError, ValueError):
        return False
    return True


@dataclass(frozen=True, slots=True)
class Target:
    """Where one request goes: ``url`` as it is sent (the rendered path and query untouched, the
    host as checked), ``host`` (the key the resolver serves), the port, the literal address if the
    URL holds one, and whether the host's rule is ``private: true``."""

    url: URL
    host: str
    port: int
    literal: IPAddress | None
    private: bool

    @property
    def shown(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"


class HostRules:
    """The declared hosts, and the check of a request's URL against them."""

    def __init__(self, hosts: Sequence[HostRule]) -> None:
        self._rules: dict[tuple[str, int | None], bool] = {}
        for rule in hosts:
            problem = host_problem(rule.host)
            if problem is not None:
                raise ValueError(f"hosts: {problem}")
            key, _ = _host_key(rule.host.removeprefix("[").removesuffix("]"))
            self._rules[key, rule.port] = self._rules.get((key, rule.port), False) or rule.private

    def target(self, url_text: str) -> Target:
        """The checked target of ``url_text``, or ``Refused``: a scheme other than https (http only
        for a private host), credentials in the URL, an undeclared host or port, a dot segment."""
        if any(ord(char) <= 0x20 or ord(char) == 0x7F or char == "\\" for char in url_text):
            raise Refused("the URL holds spaces, control characters or a backslash")
        try:
            view, raw = URL(url_text), URL(url_text, encoded=True)
            host, port = view.raw_host, view.port
        except (ValueError, UnicodeError):
            raise Refused("the URL is not valid") from None
        if view.scheme not in DEFAULT_PORTS or not host or port is None:
            raise Refused("only https URLs (http for a host declared private: true) are sent")
        if view.user is not None or view.password is not None:
            raise Refused("a URL with credentials is never sent")
        key, literal = _host_key(host)
        private = self._private(key, port, view.scheme)
        if view.scheme == "http" and not private:
            raise Refused("plain http is only for a host declared private: true")
        _check_path(raw)
        try:
            sent = raw.with_host(key).with_fragment(None)
        except (ValueError, UnicodeError):
            raise Refused("the URL is not valid") from None
        return Target(sent, key, port, literal, private)

    def _private(self, key: str, port: int, scheme: str) -> bool:
        for rule_port in (port, None) if port == DEFAULT_PORTS[scheme] else (port,):
            if (key, rule_port) in self._rules:
                return self._rules[key, rule_port]
        shown = f"[{key}]" if ":" in key else key
        raise Refused(f"{shown}:{port} is not a declared host")


def _check_path(raw: URL) -> None:
    if not raw.raw_path_qs.isascii():
        raise Refused("the URL's path or query is not percent-encoded")
    for segment in unquote(raw.raw_path).replace("\\", "/").split("/"):
        if segment in (".", ".."):
            raise Refused("the URL's path has a dot segment (. or ..)")


def check_addresses(target: Target, addresses: Sequence[str]) -> tuple[str, ...]:
    """Every address ``target``'s host resolved to, each allowed, or ``Refused`` naming the first
    that is not (a mix of good and bad answers is refused: the lookup is not trusted)."""
    checked: list[str] = []
    for text in addresses:
        try:
            ip = ipaddress.ip_address(text)
        except ValueError:
            raise Refused(f"{target.host} resolved to something that is not an address") from None
        problem = address_problem(ip, private=target.private)
        if problem is not None:
            hint = "" if target.private else " (allowed only for a host declared private: true)"
            raise Refused(f"{target.host} resolves to {problem}{hint}")
        checked.append(str(ip))
    if not checked:
        raise Refused(f"{target.host} resolved to no address")
    return tuple(dict.fromkeys(checked))


async def system_resolve(host: str, port: int) -> list[str]:
    """The system resolver's addresses for ``host`` (A and AAAA), in its order, once."""
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [str(info[4][0]) for info in infos]
