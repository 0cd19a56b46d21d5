"""Where a tool may send: the file's ``hosts`` as HostRules (an IP literal or a local name only with
``private: true``) and a tool's ``url`` read as a template whose scheme, host and port are fixed text
(no placeholder there), declared, and https unless the host is ``private: true``."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from urllib.parse import urlsplit

from services.actions.network import host_problem
from services.actions.placeholders import Segment, TemplateError, parse
from services.actions.request import HostRule
from services.actions.spec import HostSpec

DEFAULT_PORTS = {"https": 443, "http": 80}
LOCAL_SUFFIXES = (".localhost", ".local", ".internal", ".lan", ".home.arpa", ".corp", ".intranet")


@dataclass(frozen=True, slots=True)
class UrlTemplate:
    """A tool's url split where placeholders may not reach: ``origin`` is fixed text."""

    scheme: str
    host: str
    port: int
    origin: str
    path: list[Segment]
    query: list[Segment]


def is_ip_literal(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def host_rule(entry: HostSpec) -> HostRule | str:
    """The rule for one ``hosts`` entry, or what is wrong with it."""
    raw = entry.host.strip()
    if not raw.isascii():
        return f"{raw!r} is not ASCII: write the name in its xn-- form"
    try:
        parts = urlsplit("//" + raw)
        host, port = parts.hostname or "", parts.port
    except ValueError:
        return f"{raw!r} is not a host: write a name or an address, with :port when not 443"
    if not host or parts.path or parts.query or parts.fragment or parts.username is not None:
        return f"{raw!r} is not a host: write only the name (or address) and :port, no scheme or path"
    if not is_ip_literal(host) and all(part.isdigit() or part.startswith("0x") for part in host.split(".") if part):
        return f"{raw!r} is an address in a non-canonical form: write it as a.b.c.d"
    if (problem := host_problem(host)) is not None:
        return f"{raw!r}: {problem}"
    if not entry.private and is_ip_literal(host):
        return f"{raw!r} is an IP address: list it with private: true (or list the host's name)"
    if not entry.private and ("." not in host or host == "localhost" or host.endswith(LOCAL_SUFFIXES)):
        return f"{raw!r} is a local name: list it with private: true if the bot may call it"
    return HostRule(host=host, port=port, private=entry.private)


def _rule_for(rules: list[HostRule], scheme: str, host: str, port: int) -> HostRule | None:
    for rule in rules:
        if rule.host == host and (rule.port or DEFAULT_PORTS[scheme]) == port:
            return rule
    return None


def _origin(url: str) -> tuple[str, str, int, str, str] | str:
    """scheme, host, port, origin text and the rest (path, query), or what is wrong."""
    scheme, sep, rest = url.partition("://")
    if not sep or scheme.lower() not in DEFAULT_PORTS:
        return "must start with https:// (or http:// for a host listed private: true)"
    cut = min([i for i in (rest.find("/"), rest.find("?")) if i >= 0], default=len(rest))
    authority, tail = rest[:cut], rest[cut:]
    if "{" in authority or "}" in authority or "$" in authority:
        return "no placeholder may stand in the scheme, host or port: the target is fixed text"
    if "@" in authority:
        return "no user or password in the url: credentials go in headers, from ${ENV}"
    if "#" in url:
        return "no # fragment in the url: remove it"
    try:
        parts = urlsplit(f"{scheme.lower()}://{authority}")
        host, port = parts.hostname or "", parts.port or DEFAULT_PORTS[scheme.lower()]
    except ValueError:
        return "the host or port cannot be read: write https://host[:port]/path"
    if not host:
        return "has no host: write https://host/path"
    return scheme.lower(), host, port, f"{scheme.lower()}://{authority.lower()}", tail


def url_template(url: str, rules: list[HostRule]) -> UrlTemplate | str:
    """The tool's url as a template, or what is wrong (one line, with the fix)."""
    found = _origin(url)
    if isinstance(found, str):
        return found
    scheme, host, port, origin, tail = found
    rule = _rule_for(rules, scheme, host, port)
    if rule is None:
        shown = host if port == DEFAULT_PORTS[scheme] else f"{host}:{port}"
        return f"the host {shown} is not in hosts: add it there (or fix the url)"
    if scheme == "http" and not rule.private:
        return f"http:// is allowed only for a host listed with private: true: use https:// for {host}"
    path, _, query = tail.partition("?")
    if path and not path.startswith("/"):
        return "the path must start with /"
    try:
        return UrlTemplate(scheme, host, port, origin, parse(path), parse(query))
    except TemplateError as exc:
        return str(exc)
