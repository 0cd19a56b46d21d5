"""HTML (a help-center export): page chrome (script, style, nav, header, footer, aside, and what
says it is chrome: ARIA navigation roles, navigation/breadcrumb/table-of-contents classes) dropped,
h1-h6 as the heading path, paragraphs, list items, table rows, <dt>/<dd> and <summary>/<details> as
sections, the canonical link as the document's url."""

from __future__ import annotations

from html.parser import HTMLParser

from services.core.knowledge import web_url
from services.knowledge.documents import Document, Section, UnreadableDocument, squash

_SKIP = {"script", "style", "nav", "header", "footer", "aside", "noscript", "template", "svg", "form", "button"}
_BLOCKS = {"p", "li", "dd", "td", "th", "pre", "blockquote", "div", "section", "article", "main", "body", "tr"}
_HEADINGS = {f"h{level}": level for level in range(1, 7)}
_CHROME_ROLES = {"navigation", "banner", "contentinfo", "search"}
_CHROME_CLASSES = {"navheader", "navfooter", "breadcrumb", "breadcrumbs", "toc", "sidebar", "skip-link"}
_VOID = {"br", "img", "hr", "meta", "link", "input", "source", "wbr", "area", "base", "col", "embed", "track"}


def _chrome(attrs: list[tuple[str, str | None]]) -> bool:
    """An element marked as page chrome (DocBook's navheader/toc divs, a theme's breadcrumbs)."""
    values = dict(attrs)
    classes = set((values.get("class") or "").lower().split())
    return (values.get("role") or "").lower() in _CHROME_ROLES or bool(classes & _CHROME_CLASSES)


class _Reader(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.title = ""
        self.url: str | None = None
        self.sections: list[Section] = []
        self._skip_depth = 0
        self._skip_tag = ""
        """The element being skipped: only its own start and end tags count (a <li> or <option> left
        unclosed inside a <nav>, valid HTML, must not swallow the rest of the page)."""
        self._stack: list[tuple[int, str]] = []
        self._text: list[str] = []
        self._heading: int | None = None
        self._in_title = False
        self._question: str | None = None

    def _flush(self) -> None:
        text = squash(" ".join(self._text))
        self._text.clear()
        if not text:
            return
        if self._heading is not None:
            level = self._heading
            while self._stack and self._stack[-1][0] >= level:
                self._stack.pop()
            self._stack.append((level, text))
            return
        headings = tuple(title for _, title in self._stack)
        if self._question is not None:
            headings = (*headings, self._question)
        self.sections.append(Section(headings, text))

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if self._skip_depth:
            self._skip_depth += tag == self._skip_tag
            return
        if tag in _SKIP or _chrome(attrs):
            if tag not in _VOID:
                self._skip_tag, self._skip_depth = tag, 1
            return
        if tag == "link" and self.url is None:
            values = dict(attrs)
            if (values.get("rel") or "").lower() == "canonical" and values.get("href"):
                self.url = values["href"]
        elif tag == "title":
            self._in_title = True
        elif tag in _HEADINGS:
            self._flush()
            self._question = None
            self._heading = _HEADINGS[tag]
        elif tag in ("dt", "summary"):
            self._flush()
            self._question = None
            self._heading = 7
        elif tag in _BLOCKS or tag == "br":
            self._flush()

    def handle_endtag(self, tag: str) -> None:
        if self._skip_depth:
            self._skip_depth -= tag == self._skip_tag
            return
        if tag == "title":
            self._in_title = False
        elif tag in _HEADINGS or tag in ("dt", "summary"):
            if tag in ("dt", "summary"):
                self._question = squash(" ".join(self._text)) or None
                self._text.clear()
            else:
                self._flush()
            self._heading = None
        elif tag in ("dl", "details"):
            self._flush()
            self._question = None
        elif tag in _BLOCKS:
            self._flush()

    def handle_data(self, data: str) -> None:
        if self._skip_depth:
            return
        if self._in_title:
            self.title += data
        else:
            self._text.append(data)


def _inert_tail(text: str) -> str:
    """Every "<" after the last ">" written as "&lt;" (the same text once read). No tag can end there,
    yet Python 3.11's ``html.parser`` rescans to the end of the input from each such "<" at
    ``close()``: 20 kB of "<a b" took 4 s, 100 kB minutes (its regexes, holding the GIL)."""
    last = text.rfind(">")
    if "<" not in text[last + 1 :]:
        return text
    return text[: last + 1] + text[last + 1 :].replace("<", "&lt;")


def _in_open_start_tag(unparsed: str) -> bool:
    """What ``html.parser`` keeps unparsed after ``feed`` starts a tag ("<" and a letter)."""
    return unparsed[:1] == "<" and unparsed[1:2].isascii() and unparsed[1:2].isalpha()


def parse_html(text: str, *, path: str, fallback_title: str) -> Document:
    reader = _Reader()
    try:
        reader.feed(_inert_tail(text))
        if _in_open_start_tag(reader.rawdata):
            # The input ends inside a start tag (its ">" all quoted): nothing more is read, as HTML5
            # and Python 3.13.4+ do; 3.11's close() rescanned the rest from each "<" in it (100 kB: 25 s).
            reader.rawdata = ""
        reader.close()
    except AssertionError as exc:  # _markupbase's way to refuse a declaration such as "<![<!["
        raise UnreadableDocument(f"malformed HTML: {exc}"[:200]) from None
    reader._flush()
    first_heading = next((s.headings[0] for s in reader.sections if s.headings), None)
    title = squash(reader.title) or first_heading or fallback_title
    return Document(path=path, title=title, url=web_url(reader.url), sections=tuple(reader.sections))
