"""One extraction job: a file's bytes → its Document (knowledge) or its rendered text within a
character cap (a customer's document). Run inside the sandbox's child process (``sandbox.py``),
so the job and its answer travel as JSON: ``Job`` and ``document_from``/``document_json``.

Pure and synchronous; what bounds its time and memory is the child it runs in."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from services.knowledge.documents import Document, Section, UnreadableDocument, decode_text, parse_text, squash
from services.knowledge.html_doc import parse_html
from services.knowledge.markdown_doc import parse_markdown
from services.knowledge.pdf_doc import MAX_CONTENT, MAX_PAGES, parse_pdf


@dataclass(frozen=True, slots=True)
class Job:
    kind: str
    """pdf, markdown, html or text (documents.SUFFIXES' values)."""
    path: str
    fallback_title: str
    max_pages: int = MAX_PAGES
    max_content: int = MAX_CONTENT
    """Bytes of PDF content streams interpreted in all (pdf_doc.WorkBudget)."""
    render_chars: int | None = None
    """None: the Document comes back; a number: its rendered text, at most this many characters."""


def utf8_prefix(data: bytes, limit: int) -> bytes:
    """At most ``limit`` bytes of ``data``, ending on a character boundary (UTF-8 continuation bytes
    are 0b10xxxxxx: at most three are stepped back over)."""
    if len(data) <= limit:
        return data
    end = limit
    while end > max(0, limit - 3) and data[end] & 0xC0 == 0x80:
        end -= 1
    return data[:end]


def parse(job: Job, data: bytes) -> Document:
    """``data`` as a Document by ``job.kind``; UnreadableDocument with the reason otherwise."""
    if job.kind == "pdf":
        return parse_pdf(
            data, path=job.path, fallback_title=job.fallback_title, max_pages=job.max_pages, max_content=job.max_content
        )
    text = decode_text(data)
    if job.kind == "markdown":
        return parse_markdown(text, path=job.path, fallback_title=job.fallback_title)
    if job.kind == "html":
        return parse_html(text, path=job.path, fallback_title=job.fallback_title)
    return parse_text(text, path=job.path, fallback_title=job.fallback_title)


def _lines(text: str) -> list[str]:
    """A section's lines, whitespace squashed; a fenced code block keeps its indentation."""
    if text.lstrip().startswith(("```", "~~~")):
        return [line.rstrip() for line in text.splitlines() if line.strip()]
    return [line for line in (squash(line) for line in text.splitlines()) if line]


def render(document: Document) -> str:
    """The sections as text a model reads: a heading-path line ("Returns › Refunds") whenever the
    path changes, a blank line before it, then the sections' lines."""
    blocks: list[list[str]] = []
    current: tuple[str, ...] | None = None
    for section in document.sections:
        lines = _lines(section.text)
        if not lines:
            continue
        headings = tuple(h for h in (squash(h) for h in section.headings) if h)
        if headings != current or not blocks:
            blocks.append([" › ".join(headings)] if headings else [])
            current = headings
        blocks[-1].extend(lines)
    return "\n\n".join("\n".join(block) for block in blocks if block)


def document_json(document: Document) -> dict[str, Any]:
    return asdict(document)


def document_from(answer: dict[str, Any]) -> Document:
    sections = tuple(Section(tuple(s["headings"]), s["text"]) for s in answer["sections"])
    return Document(answer["path"], answer["title"], answer["url"], sections, answer["pages"])


def run(job: Job, data: bytes) -> dict[str, Any]:
    """What the child answers: {"document": …} or {"text", "cut", "pages"}, or {"refused", "kind"}."""
    try:
        document = parse(job, data)
    except UnreadableDocument as exc:
        return {"refused": str(exc), "kind": exc.kind}
    if job.render_chars is None:
        return {"document": document_json(document)}
    text = render(document)
    cut = len(text) > job.render_chars
    return {"text": text[: job.render_chars], "cut": cut, "pages": document.pages}
