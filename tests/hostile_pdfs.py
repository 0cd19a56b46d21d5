"""Hostile PDFs written by hand (no PDF library writes them on purpose): a small page drawing one big
form XObject many times, and a file of 100 000 pages sharing one content stream under a flat /Kids.
Both are tiny to build and cheap to store; what they cost is the reader's work."""

from __future__ import annotations

import zlib

TEXT_LINE = b"BT /F1 12 Tf 72 720 Td (Refunds are paid within 14 days of the return.) Tj ET\n"
FONT = b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"


def assemble(objects: list[bytes]) -> bytes:
    """Objects 1..n (1 is the catalog), their cross-reference table and trailer."""
    parts, offsets, size = [b"%PDF-1.4\n"], [], 9
    for number, body in enumerate(objects, start=1):
        chunk = b"%d 0 obj\n%s\nendobj\n" % (number, body)
        offsets.append(size)
        parts.append(chunk)
        size += len(chunk)
    parts.append(b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1))
    parts.append(b"".join(b"%010d 00000 n \n" % offset for offset in offsets))
    parts.append(b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, size))
    return b"".join(parts)


def stream(content: bytes, extra: bytes = b"") -> bytes:
    packed = zlib.compress(content, 9)
    return b"<< %s /Length %d /Filter /FlateDecode >>\nstream\n%s\nendstream" % (extra, len(packed), packed)


def form_fan_out_pdf(form_bytes: int = 2_000_000, draws: int = 20) -> bytes:
    """One page whose own content is a few bytes (``/Fm0 Do`` ``draws`` times) and a form XObject of
    ``form_bytes`` of text operators: a page-content check passes it, text extraction interprets the
    form once per draw (~40 MB of operators from a ~7 kB file)."""
    form = TEXT_LINE * (form_bytes // len(TEXT_LINE) + 1)
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R"
        b" /Resources << /Font << /F1 5 0 R >> /XObject << /Fm0 6 0 R >> >> >>",
        stream(b"q /Fm0 Do Q\n" * draws),
        FONT,
        stream(form, b"/Type /XObject /Subtype /Form /BBox [0 0 612 792] /Resources << /Font << /F1 5 0 R >> >>"),
    ]
    return assemble(objects)


def many_pages_pdf(pages: int = 100_000) -> bytes:
    """``pages`` pages under one flat /Kids array, all drawing one shared text stream (~16 MB)."""
    first = 5  # objects 1-4: catalog, page tree, the shared content, the font
    kids = b" ".join(b"%d 0 R" % (first + n) for n in range(pages))
    page = (
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 3 0 R"
        b" /Resources << /Font << /F1 4 0 R >> >> >>"
    )
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [%s] /Count %d >>" % (kids, pages),
        stream(TEXT_LINE),
        FONT,
        *([page] * pages),
    ]
    return assemble(objects)
