"""A PDF's pages walked one at a time, and the work their text extraction may do.

pypdf builds every page object on the first ``reader.pages[i]`` (``_flatten``: a 100 000-page file
costs seconds before one page is read); ``iter_pages`` walks the page tree lazily (inherited
attributes applied, cycles and depth refused), so only the pages read are built.

``WorkBudget`` bounds what extraction interprets: a page's own content and, through pypdf's
``visitor_operand_before`` hook, every form XObject each time it is drawn (a 2 MB form drawn twenty
times is 40 MB behind a few bytes). It is checked before each form is parsed."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from pypdf import PageObject, PdfReader
from pypdf.generic import ArrayObject, DictionaryObject, IndirectObject, NameObject, StreamObject

from services.knowledge.documents import UnreadableDocument

INHERITED = ("/Resources", "/MediaBox", "/CropBox", "/Rotate")
"""Page attributes a page takes from its ancestors in the tree (PDF 32000-1, 7.7.3.4)."""
MAX_DEPTH = 64
MAX_DECLARED_PAGES = 10_000_000
"""A page count the file states past this is a lie (20 MB cannot reference more pages): shown capped."""
MAX_FORMS = 10_000
"""Form XObjects looked at per page when their sizes are gathered (cycles and fan-out bounded)."""


class TooCostly(UnreadableDocument):
    """Reading the document would take more work than it is allowed."""

    def __init__(self, message: str) -> None:
        super().__init__(f"too complex to read: {message}", kind="too_complex")


def declared_pages(reader: PdfReader) -> int:
    """The page count the file states (``/Count`` of the tree's root); 0 when it states none."""
    tree = reader.root_object["/Pages"].get_object()
    count = tree.get("/Count", 0) if isinstance(tree, DictionaryObject) else 0
    return min(int(count), MAX_DECLARED_PAGES) if isinstance(count, int) and count > 0 else 0


def iter_pages(reader: PdfReader) -> Iterator[PageObject]:
    """The pages in order, each built when reached; a cycle or a tree deeper than MAX_DEPTH raises."""
    root = reader.root_object["/Pages"].get_object()
    if not isinstance(root, DictionaryObject):
        raise UnreadableDocument("broken PDF: no page tree")
    stack: list[tuple[Iterator[Any], dict[str, Any], int]] = []
    ancestors: list[int] = []
    node: DictionaryObject = root
    reference: IndirectObject | None = None
    inherit: dict[str, Any] = {}
    while True:
        if _is_page(node):
            yield _page(reader, node, reference, inherit)
        else:
            if len(stack) >= MAX_DEPTH or id(node) in ancestors:
                raise UnreadableDocument("broken PDF: page tree too deep or cyclic")
            inherit = inherit | {key: node[key] for key in INHERITED if key in node}
            kids = node.get("/Kids", ArrayObject()).get_object()
            stack.append((iter(kids if isinstance(kids, ArrayObject) else ()), inherit, id(node)))
            ancestors.append(id(node))
        found = _next_kid(stack, ancestors)
        if found is None:
            return
        node, reference, inherit = found


def _is_page(node: DictionaryObject) -> bool:
    kind = node.get("/Type")
    return kind == "/Page" or (kind is None and "/Kids" not in node)


def _next_kid(
    stack: list[tuple[Iterator[Any], dict[str, Any], int]], ancestors: list[int]
) -> tuple[DictionaryObject, IndirectObject | None, dict[str, Any]] | None:
    while stack:
        kids, inherit, _ = stack[-1]
        for kid in kids:
            node = kid.get_object() if kid is not None else None
            if isinstance(node, DictionaryObject) and node:
                return node, kid if isinstance(kid, IndirectObject) else None, inherit
        stack.pop()
        ancestors.pop()
    return None


def _page(
    reader: PdfReader, node: DictionaryObject, reference: IndirectObject | None, inherit: dict[str, Any]
) -> PageObject:
    page = PageObject(reader, reference)  # built as pypdf's own flattening builds each page
    page.update(node)
    for key, value in inherit.items():
        if key not in page:
            page[NameObject(key)] = value
    return page


def _forms(resources: Any) -> dict[str, int]:
    """Decoded bytes of every form XObject reachable from ``resources`` (nested forms too), by the
    name it is drawn with; a name used in several resource dictionaries takes the largest."""
    sizes: dict[str, int] = {}
    seen: set[int] = set()
    pending = [resources]
    while pending and len(seen) < MAX_FORMS:
        current = pending.pop()
        current = current.get_object() if current is not None else None
        xobjects = current.get("/XObject") if isinstance(current, DictionaryObject) else None
        xobjects = xobjects.get_object() if xobjects is not None else None
        if not isinstance(xobjects, DictionaryObject):
            continue
        for name, value in xobjects.items():
            form = value.get_object()
            if not isinstance(form, StreamObject) or form.get("/Subtype") != "/Form" or id(form) in seen:
                continue
            seen.add(id(form))
            sizes[name] = max(sizes.get(name, 0), len(form.get_data()))  # inflated in C: cheap beside parsing
            pending.append(form.get("/Resources"))
    return sizes


class WorkBudget:
    """Bytes of content streams interpreted: at most ``per_page`` for a page (its forms counted
    each time they are drawn) and ``total`` for the document."""

    def __init__(self, *, per_page: int, total: int) -> None:
        self.per_page = per_page
        self.total = total
        self.spent = 0
        self._page_spent = 0
        self._page_number = 0
        self._forms: dict[str, int] = {}
        self.exceeded: TooCostly | None = None

    def start_page(self, number: int, page: PageObject) -> None:
        """Count ``page``'s own content; TooCostly when over a budget."""
        self._page_number, self._page_spent = number, 0
        self._forms = _forms(page.get("/Resources"))
        contents = page.get_contents()
        self._spend(len(contents.get_data()) if contents is not None else 0)

    def visitor(self, operator: bytes, operands: Any, _cm: Any, _tm: Any) -> None:
        """pypdf's ``visitor_operand_before``: a form is counted as it is drawn, before it is parsed.
        Once over budget every later operator raises again: pypdf swallows an exception raised
        inside a form (its warning "Impossible to decode XFormObject"), not one at the page's level."""
        if self.exceeded is not None:
            raise self.exceeded
        if operator == b"Do" and operands:
            self._spend(self._forms.get(str(operands[0]), 0))

    def _spend(self, size: int) -> None:
        self._page_spent += size
        self.spent += size
        if self._page_spent > self.per_page:
            number, limit = self._page_number, self.per_page
            self.exceeded = TooCostly(f"page {number} draws over {limit} bytes of content (a PDF bomb?)")
        elif self.spent > self.total:
            self.exceeded = TooCostly(f"over {self.total} bytes of page content")
        if self.exceeded is not None:
            raise self.exceeded

    def check(self) -> None:
        """Raise the budget's refusal if a form's swallowed it."""
        if self.exceeded is not None:
            raise self.exceeded
