"""Hidden links: a reply (the model's words, fed by a caption, a customer's PDF, a document) must never
show one address and open another. A link to a host the operator did not declare (SAFE_LINK_HOSTS,
the documents' own url:/canonical links) is shown with its address visible; credentials, other
schemes and look-alike (IDN) hosts are never a link; a citation's URL is literal text."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import telegramify_markdown
from pydantic import ValidationError

from bot.settings import BotSettings
from bot.telegram.link_hosts import LinkPolicy
from bot.telegram.links import safe_entities
from bot.telegram.render import render_chunks
from services.core.knowledge import Passage
from services.core.tokens import TokenCounter
from services.engine.citations import render_citations
from services.knowledge.library import KnowledgeLibrary

NOTHING = LinkPolicy()
OURS = LinkPolicy(declared="help.example.com, *.shop.example")

Rendered = tuple[str, list[tuple[str, str | None]]]


def render(markdown: str, policy: LinkPolicy = NOTHING) -> Rendered:
    ((text, entities),) = render_chunks(markdown, links=policy)
    return text, [(entity.type, entity.url) for entity in entities]


def links(rendered: Rendered) -> list[str | None]:
    return [url for kind, url in rendered[1] if kind == "text_link"]


def test_a_link_to_an_undeclared_host_shows_its_address() -> None:
    text, entities = render("Refunds: [help.example.com/refund](https://evil.example/login).", OURS)
    assert text == "Refunds: help.example.com/refund (https://evil.example/login).", text
    assert not links((text, entities))


def test_links_to_declared_hosts_stay_links() -> None:
    reply = (
        "[our help](https://help.example.com/refund), [cart](https://shop.example/cart), [x](https://a.b.shop.example/)"
    )
    text, entities = render(reply, OURS)
    assert text == "our help, cart, x", text
    assert links((text, entities)) == [
        "https://help.example.com/refund",
        "https://shop.example/cart",
        "https://a.b.shop.example/",
    ]


@pytest.mark.parametrize(
    "url",
    [
        "https://evilhelp.example.com/",  # a suffix, not a subdomain, of a declared host
        "https://help.example.com.evil.example/",
        "https://sub.help.example.com/",  # help.example.com is declared exactly, without *.
        "https://shop.example.evil.example/",
        "http://evil.example:8080/",
    ],
)
def test_look_alike_hosts_are_not_declared_hosts(url: str) -> None:
    text, entities = render(f"[help](https://x.invalid/)[our page]({url})", OURS)
    assert not links((text, entities)) and url in text, text


def test_an_autolink_to_an_undeclared_host_is_shown_once_and_no_link() -> None:
    text, entities = render("Go to <https://evil.example/login> now")
    assert text == "Go to https://evil.example/login now" and not links((text, entities)), (text, entities)


@pytest.mark.parametrize(
    "markdown",
    [
        "[Open your account](javascript:alert(document.cookie))",
        "[Open your account](tg://resolve?domain=evil_bot)",
        "[Open your account](tg://user?id=42)",
        "[Open your account](data:text/html,<script>alert(1)</script>)",
        "[Open your account](file:///etc/passwd)",
        "[Open your account](/relative/path)",
        "[Open your account](<https://evil.example/a b>)",  # a space: which host opens is a guess
    ],
)
def test_other_schemes_and_malformed_targets_are_never_links(markdown: str) -> None:
    text, entities = render(markdown, OURS)
    assert text == "Open your account" and not links((text, entities)), (text, entities)


def test_credentials_in_a_url_are_refused_and_never_shown() -> None:
    text, entities = render("[help](https://admin:hunter2@help.example.com/x)", OURS)
    assert not links((text, entities)) and "hunter2" not in text and "admin" not in text, text
    assert text == "help (https://help.example.com/x)", text
    text, entities = render("[help.example.com](https://help.example.com@evil.example/login)", OURS)
    assert text == "help.example.com (https://evil.example/login)" and not links((text, entities)), text


def test_credentials_in_plain_text_urls_are_cut() -> None:
    text, _ = render("See https://help.example.com:s3cret@evil.example/login, then reply.", OURS)
    assert text == "See https://evil.example/login, then reply.", text


def test_idn_look_alike_hosts_are_shown_in_punycode() -> None:
    apple = "https://\u0430pple.com/account"  # Cyrillic а
    declared = LinkPolicy(declared="apple.com")
    text, entities = render(f"[Apple support]({apple})", declared)
    assert text == "Apple support (https://xn--pple-43d.com/account)" and not links((text, entities)), text
    assert render(f"<{apple}>", declared)[0] == "https://xn--pple-43d.com/account"
    assert render(f"Visit {apple} today", declared)[0] == "Visit https://xn--pple-43d.com/account today"


@pytest.mark.parametrize("host", ["sho\u00df.example", "SHO\u1e9e.example"], ids=["sharp s", "capital sharp s"])
def test_a_sharp_s_host_is_not_the_ss_host_a_browser_would_not_open(host: str) -> None:
    """Browsers resolve hosts by UTS #46 non-transitional IDNA: ß is its own label (xn--sho-7ka),
    not "ss" as Python's IDNA 2003 codec has it, so shoß.example is not a declared shoss.example."""
    text, entities = render(f"[Our shop](https://{host}/login)", LinkPolicy(declared="shoss.example"))
    assert text == "Our shop (https://xn--sho-7ka.example/login)" and not links((text, entities)), text


def test_an_idn_host_the_operator_declares_stays_a_link() -> None:
    text, entities = render("[магазин](https://магазин.рф/корзина)", LinkPolicy(declared="магазин.рф"))
    assert links((text, entities)) == ["https://магазин.рф/корзина"], (text, entities)


def test_code_is_left_as_written() -> None:
    text, _ = render("`https://\u0430pple.com` and\n\n```\nhttps://u:p@evil.example/\n```")
    assert "\u0430pple.com" in text and "u:p@evil.example" in text, text


def test_formatting_after_a_shown_address_keeps_its_place() -> None:
    text, _ = render("**[bold link](https://evil.example/a)** then *italic* and 🙂 **end**")
    assert text == "bold link (https://evil.example/a) then italic and 🙂 end", text
    ((_, chunk_entities),) = render_chunks("**[bold link](https://evil.example/a)** then *italic* and 🙂 **end**")
    units = text.encode("utf-16-le")
    covered = [(e.type, units[2 * e.offset : 2 * (e.offset + e.length)].decode("utf-16-le")) for e in chunk_entities]
    assert covered == [("bold", "bold link"), ("italic", "italic"), ("bold", "end")], covered


def test_a_citation_url_is_literal_and_a_link_to_the_document() -> None:
    url = "https://help.example.com/returns_*policy*_"
    passage = Passage("p", "returns.md", "Returns", ("Refunds",), "Refunds take 14 days.", 8, url=url)
    cited = render_citations("Refunds take 14 days [K1].", {"K1": passage})
    text, entities = render(cited.text, LinkPolicy(declared="help.example.com"))
    assert text.endswith(f"[1] returns.md › Refunds — {url}"), text
    assert entities == [("text_link", url)], entities
    text, entities = render(cited.text)  # the host not (or no longer) declared: still the literal URL
    assert text.endswith(f"— {url}") and not entities, (text, entities)


def test_a_citation_url_with_strikethrough_or_spoiler_marks_stays_one_address() -> None:
    url = "https://help.example.com/a~~b~~c||d||"
    passage = Passage("p", "returns.md", "Returns", ("Refunds",), "Refunds take 14 days.", 8, url=url)
    cited = render_citations("Refunds take 14 days [K1].", {"K1": passage})
    text, entities = render(cited.text, LinkPolicy(declared="help.example.com"))
    same = "https://help.example.com/a%7E%7Eb%7E%7Ec%7C%7Cd%7C%7C"  # what a browser requests for ``url``
    assert text.endswith(f"— {same}") and entities == [("text_link", same)], (text, entities)


def test_the_documents_own_links_are_declared_hosts(tmp_path: Path, counter: TokenCounter) -> None:
    (tmp_path / "returns.md").write_text("---\nurl: https://help.example.com/returns\n---\n# Refunds\n\nIn 14 days.\n")
    (tmp_path / "faq.html").write_text(
        '<link rel="canonical" href="https://www.shop.example/faq"><h1>FAQ</h1><p>Answers.</p>'
    )
    library = KnowledgeLibrary(
        root=tmp_path, counter=counter, passage_tokens=200, max_file_bytes=100_000, min_score=0.0, refresh_seconds=60
    )
    library.load()
    policy = LinkPolicy(knowledge=library)
    reply = (
        "[refunds](https://help.example.com/refunds) [faq](https://www.shop.example/x) [evil](https://shop.example/)"
    )
    text, entities = render(reply, policy)
    assert links((text, entities)) == ["https://help.example.com/refunds", "https://www.shop.example/x"], text
    assert text.endswith("evil (https://shop.example/)"), text


async def test_a_deleted_documents_host_stops_counting(tmp_path: Path, counter: TokenCounter) -> None:
    (tmp_path / "returns.md").write_text("---\nurl: https://help.example.com/returns\n---\n# Refunds\n\nIn 14 days.\n")
    (tmp_path / "other.md").write_text("# Other\n\nSomething else.\n")
    library = KnowledgeLibrary(
        root=tmp_path, counter=counter, passage_tokens=200, max_file_bytes=100_000, min_score=0.0, refresh_seconds=60
    )
    library.load()
    policy = LinkPolicy(knowledge=library)
    assert links(render("[refunds](https://help.example.com/refunds)", policy))
    (tmp_path / "returns.md").unlink()
    assert await library.refresh()
    assert render("[refunds](https://help.example.com/refunds)", policy)[0] == (
        "refunds (https://help.example.com/refunds)"
    )


@pytest.mark.parametrize("value", ["https://shop.example/path", "shop example", "shop.example:8080", "*", "a..b"])
def test_a_malformed_safe_link_host_stops_the_start(value: str) -> None:
    with pytest.raises(ValidationError, match="SAFE_LINK_HOSTS"):
        BotSettings(_env_file=None, bot_token="1:x", safe_link_hosts=value)  # type: ignore[call-arg]


@pytest.mark.parametrize(
    "markdown",
    [
        "[a](https://evil.example/) " * 4_000,
        "<https://evil.example/a> " * 4_000,
        "https://\u0430.b:p@c.example/ " * 4_000,
        "://" * 33_000,
        "`a`://x@y " * 10_000,
    ],
    ids=["shown links", "autolinks", "credentials and IDN", "separators", "code"],
)
def test_making_links_honest_is_linear_on_100_kb(markdown: str) -> None:
    """The converter's own cost aside (telegramify-markdown), the link pass is one sweep plus binary
    searches: ~0.1-0.3 s for 100 kB here, within the issue's 1 s bound on a busy machine."""
    plain, entities = telegramify_markdown.convert(markdown)
    started = time.thread_time()  # this thread's CPU time: what the pass costs, however busy the machine
    safe_entities(plain, entities, OURS)
    assert time.thread_time() - started < 1.0
