"""the sources line the bot appends (citations.py) goes through the Markdown → Telegram
renderer with the model's text, so document text becomes Telegram markup."""

from __future__ import annotations

from bot.telegram.render import render_chunks
from services.core.knowledge import Passage
from services.engine.citations import render_citations
from services.knowledge.html_doc import parse_html


def rendered(passage: Passage) -> tuple[str, list[tuple[str, str | None]]]:
    cited = render_citations("Refunds take 14 days [K1].", {"K1": passage})
    ((text, entities),) = render_chunks(cited.text)
    return text, [(entity.type, entity.url) for entity in entities]


def test_a_heading_cannot_plant_a_hidden_link_in_the_sources_line() -> None:
    """An HTML export's heading "[Claim your refund here](https://evil.example/pay)" is kept verbatim
    (html_doc does not touch Markdown), cited, and rendered as a text_link whose target the customer
    does not see, in a message the bot signs as its own source list."""
    page = (
        "<h1>[Claim your refund here](https://evil.example/pay)</h1><p>Refunds are paid within 14 days.</p>"
        '<link rel="canonical" href="https://help.example.com/faq">'
    )
    document = parse_html(page, path="faq.html", fallback_title="faq")
    section = document.sections[0]
    passage = Passage("p", "faq.html", document.title, section.headings, section.text, 8, url=document.url)
    text, entities = rendered(passage)
    assert ("text_link", "https://evil.example/pay") not in entities, (text, entities)


def test_a_file_name_is_shown_as_it_is() -> None:
    """Markdown in file names: "__init__.md" is shown as bold "init.md"."""
    text, entities = rendered(Passage("p", "docs/__init__.md", "T", ("Refunds",), "x", 1))
    assert "__init__.md › Refunds" in text, (text, entities)


def test_only_web_links_are_rendered_as_a_source_link() -> None:
    """Front matter ``url:`` is taken as is: "javascript:alert(1)" (or "file:///etc/passwd") is shown to
    the customer as the document's link."""
    text, _ = rendered(Passage("p", "returns.md", "T", ("Refunds",), "x", 1, url="javascript:alert(1)"))
    assert "javascript:" not in text, text
