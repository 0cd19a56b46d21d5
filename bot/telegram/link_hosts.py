"""The hosts a reply may link to: SAFE_LINK_HOSTS (checked at start-up) and the hosts of the documents'
own links. Light on imports: the settings check uses it before anything heavy is loaded."""

from __future__ import annotations

from urllib.parse import urlsplit

import idna

from services.ports.knowledge import KnowledgeSnapshot, KnowledgeSource


def ascii_host(host: str) -> str:
    """``host`` as a browser resolves it: UTS #46 non-transitional IDNA (as the WHATWG URL standard:
    ``ß`` stays its own punycode label, never ``ss``), lower case, no trailing dot. A label IDNA
    refuses is punycoded raw: never shown in look-alike letters, never equal to an ASCII host."""
    host = host.rstrip(".").lower()
    if host.isascii():
        return host
    try:
        return idna.encode(host, uts46=True, transitional=False).decode("ascii").lower()
    except idna.IDNAError:
        labels = host.split(".")
        return ".".join(part if part.isascii() else "xn--" + part.encode("punycode").decode() for part in labels)


def _valid_host(host: str) -> bool:
    labels = host.split(".")
    return all(label and len(label) <= 63 and all(c.isalnum() or c == "-" for c in label) for label in labels)


def parse_safe_hosts(raw: str) -> tuple[frozenset[str], tuple[str, ...]]:
    """SAFE_LINK_HOSTS → (exact hosts, domains whose subdomains match); ValueError on an entry that is
    not a host name (a URL, a port, spaces, a bare ``*``)."""
    exact: set[str] = set()
    domains: list[str] = []
    for entry in (part.strip() for part in raw.split(",")):
        if not entry:
            continue
        wildcard = entry.startswith("*.")
        host = ascii_host(entry[2:] if wildcard else entry)
        if not _valid_host(host):
            raise ValueError(
                f"{entry!r} is not a host name: write SAFE_LINK_HOSTS entries as shop.example or *.shop.example"
            )
        exact.add(host)
        if wildcard:
            domains.append("." + host)
    return frozenset(exact), tuple(domains)


def document_hosts(snapshot: KnowledgeSnapshot) -> frozenset[str]:
    """The hosts of the documents' own links (front matter ``url:``, HTML canonical)."""
    hosts: set[str] = set()
    for url in {p.url for p in snapshot.passages if p.url}:
        try:
            host = urlsplit(url).hostname
        except ValueError:
            continue
        if host:
            hosts.add(ascii_host(host))
    return frozenset(hosts)


class LinkPolicy:
    """The hosts replies may link to: SAFE_LINK_HOSTS and, with ``knowledge``, the hosts of the
    current snapshot's documents (recomputed when the library swaps in a new snapshot)."""

    def __init__(self, declared: str = "", knowledge: KnowledgeSource | None = None) -> None:
        self._exact, self._domains = parse_safe_hosts(declared)
        self._knowledge = knowledge
        self._snapshot: KnowledgeSnapshot | None = None
        self._documents: frozenset[str] = frozenset()

    def _document_hosts(self) -> frozenset[str]:
        if self._knowledge is None:
            return frozenset()
        snapshot = self._knowledge.current()
        if snapshot is not self._snapshot:
            self._snapshot, self._documents = snapshot, document_hosts(snapshot)
        return self._documents

    def allows(self, host: str) -> bool:
        """``host``: already ASCII (``ascii_host``)."""
        if host in self._exact or host in self._document_hosts():
            return True
        return any(host.endswith(domain) for domain in self._domains)
