"""Every document, a customer's or the operator's, is read within a budget of work, time and memory
(issue 36): a page drawing a 2 MB form twenty times is refused as too complex, not interpreted for
minutes; a 100 000-page file has only its read pages built; an extraction past its deadline is killed
with its child process; a big text file is read and tokenised no further than its caps.

The deadlines here are hang guards (the old code took 105 s and 24 s on these files), never budgets."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest

from services.core.errors import MediaError
from services.core.tokens import TokenCounter, load_encoding
from services.knowledge.corpus import read_corpus
from services.knowledge.documents import UnreadableDocument
from services.knowledge.reading import read_document
from services.media.customer_documents import cut_to_tokens, read_customer_document
from tests.hostile_pdfs import form_fan_out_pdf, many_pages_pdf

T = TypeVar("T")
HANG_GUARD = 60.0


async def within_guard(function: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    return await asyncio.wait_for(asyncio.to_thread(function, *args, **kwargs), HANG_GUARD)


def customer(data: bytes, counter: TokenCounter, name: str = "invoice.pdf", **kwargs: Any) -> Any:
    return read_customer_document(data, file_name=name, mime_type=None, max_tokens=3000, counter=counter, **kwargs)


async def test_a_page_drawing_a_big_form_twenty_times_is_refused_as_too_complex(counter: TokenCounter) -> None:
    """6.8 kB on the wire, a page content of a few bytes, 40 MB of operators: main interpreted them
    all (105 s) and answered "could not open"."""
    data = form_fan_out_pdf()
    assert len(data) < 10_000
    with pytest.raises(MediaError) as refused:
        await within_guard(customer, data, counter)
    assert refused.value.reason == "too_complex" and refused.value.kind == "document"


async def test_a_form_fan_out_in_the_knowledge_folder_is_skipped_with_one_line(
    tmp_path: Path, counter: TokenCounter, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "fan.pdf").write_bytes(form_fan_out_pdf())
    (tmp_path / "faq.md").write_text("# Refunds\n\nRefunds are paid to the original card within 14 days.\n")
    caplog.set_level(logging.WARNING)
    corpus = await within_guard(
        read_corpus, tmp_path, counter=counter, passage_tokens=220, max_file_bytes=20 * 1024 * 1024
    )
    assert [s.path for s in corpus.skipped] == ["fan.pdf"]
    assert "too complex" in corpus.skipped[0].reason
    assert [d.path for d in corpus.documents] == ["faq.md"]
    lines = [r.getMessage() for r in caplog.records if "fan.pdf" in r.getMessage()]
    assert len(lines) == 1 and "too complex" in lines[0], lines


def test_only_the_pages_read_are_built(monkeypatch: pytest.MonkeyPatch) -> None:
    """pypdf builds every page object on the first ``reader.pages`` access (its private ``_flatten``,
    failed here on purpose): 100 000 of them for a file whose first five pages are read."""
    from pypdf import PdfReader

    from services.knowledge.pdf_doc import parse_pdf

    def flatten(*_args: Any, **_kwargs: Any) -> None:
        raise AssertionError("every page of the file built")

    monkeypatch.setattr(PdfReader, "_flatten", flatten)
    document = parse_pdf(many_pages_pdf(), path="big.pdf", fallback_title="big", max_pages=5)
    assert document.pages == 100_000
    assert len(document.sections) == 5
    assert all("14 days" in s.text for s in document.sections)


async def test_a_customer_pdf_of_100_000_pages_is_read_from_its_first_pages(counter: TokenCounter) -> None:
    data = many_pages_pdf()
    assert len(data) > 15_000_000
    read = await within_guard(customer, data, counter, name="catalogue.pdf")
    assert read.pages == 100_000 and read.truncated
    assert "14 days" in read.text


def sandbox_children() -> set[int]:
    """Processes of this one running the extraction sandbox."""
    found = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
        except OSError:
            continue
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        if parent == os.getpid() and b"services.knowledge.sandbox" in cmdline:
            found.add(int(entry))
    return found


def test_an_extraction_past_its_deadline_is_killed_and_the_next_one_gets_a_new_child() -> None:
    from services.knowledge.extraction import Job
    from services.knowledge.sandbox import Sandbox

    endless = Job("pdf", "big.pdf", "big", max_pages=100_000, max_content=10**12)  # no work budget: time only
    before = sandbox_children()  # the knowledge reader's child may be idling from an earlier test
    with Sandbox() as sandbox:
        with pytest.raises(UnreadableDocument) as refused:
            sandbox.extract(endless, many_pages_pdf(), timeout=0.5)
        assert refused.value.kind == "too_complex" and "not done within 0.5 s" in str(refused.value)
        assert sandbox_children() == before  # killed and reaped
        answer = sandbox.extract(Job("markdown", "faq.md", "faq"), b"# Refunds\n\nWithin 14 days.\n", timeout=30)
        assert answer["document"]["sections"][0]["text"] == "Within 14 days."
        assert sandbox.started == 2


def test_a_child_killed_mid_job_refuses_that_file_and_the_next_job_gets_a_new_child() -> None:
    """The kernel's OOM killer, or a crash in a C extension: the file is refused, the reader lives on."""
    from services.knowledge.extraction import Job
    from services.knowledge.sandbox import Sandbox

    endless = Job("pdf", "big.pdf", "big", max_pages=100_000, max_content=10**12)
    before, refused = sandbox_children(), []
    with Sandbox() as sandbox:

        def extract() -> None:
            try:
                sandbox.extract(endless, many_pages_pdf(), timeout=HANG_GUARD)
            except UnreadableDocument as exc:
                refused.append(exc)

        worker = threading.Thread(target=extract)
        worker.start()
        while not (started := sandbox_children() - before) and worker.is_alive():
            time.sleep(0.005)
        os.kill(started.pop(), signal.SIGKILL)
        worker.join(HANG_GUARD)
        assert [(e.kind, str(e)) for e in refused] == [("unreadable", "the reader stopped on this file (exit code -9)")]
        answer = sandbox.extract(Job("text", "a.txt", "a"), b"Refunds within 14 days.\n", timeout=HANG_GUARD)
        assert answer["document"]["sections"][0]["text"] == "Refunds within 14 days."


def test_the_child_that_reads_documents_holds_no_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    from services.knowledge.extraction import Job
    from services.knowledge.sandbox import Sandbox

    secret = "sk-" + os.urandom(16).hex()
    monkeypatch.setenv("OPENAI_API_KEY", secret)
    monkeypatch.setenv("BOT_TOKEN", "123:" + secret)
    with Sandbox() as sandbox:
        before = sandbox_children()
        sandbox.extract(Job("text", "a.txt", "a"), b"Refunds within 14 days.\n", timeout=30)
        [child] = sandbox_children() - before
        environment = Path(f"/proc/{child}/environ").read_bytes()
        folder = os.readlink(f"/proc/{child}/cwd")  # not the project folder, where .env usually is
    assert secret.encode() not in environment and environment.startswith(b"PYTHONPATH=")
    assert folder == "/", folder


def test_a_file_over_the_memory_cap_is_refused_as_too_complex() -> None:
    from services.knowledge.extraction import Job
    from services.knowledge.sandbox import Sandbox

    text = ("Refunds are paid to the original card within fourteen days. " * 40 + "\n\n").encode() * 4000  # 10 MB
    with Sandbox(memory_bytes=64 << 20) as sandbox:  # the child alone takes ~20 MB, parsing this ~100 MB
        answer = sandbox.extract(Job("text", "a.txt", "a"), text, timeout=HANG_GUARD)
    assert answer.get("kind") == "too_complex", str(answer)[:200]


class RecordingCounter(TokenCounter):
    """The real counter, remembering the longest text it was asked to encode or count."""

    longest = 0

    def encode(self, text: str) -> list[int]:
        self.longest = max(self.longest, len(text))
        return super().encode(text)

    def count_text(self, text: str) -> int:
        self.longest = max(self.longest, len(text))
        return super().count_text(text)


@pytest.fixture
def recording(counter: TokenCounter) -> RecordingCounter:
    return RecordingCounter(encoding=load_encoding(counter.encoding_name))


def test_a_long_text_is_cut_to_its_tokens_without_tokenising_the_whole(recording: RecordingCounter) -> None:
    text = "Refunds are paid to the original card within fourteen days of the return.\n" * 70_000  # 5 MB
    cut, tokens, truncated = cut_to_tokens(text, 3000, recording)
    assert truncated and tokens <= 3000 and text.startswith(cut)
    assert recording.longest <= 3000 * 16, recording.longest  # main: 5 180 000 (the whole text)


async def test_a_19_mb_markdown_file_is_parsed_and_tokenised_only_as_far_as_its_cap(
    recording: RecordingCounter,
) -> None:
    block = "## Delivery\n\nStandard delivery takes 3-5 working days; express is next day.\n\n"
    data = (block * (19_000_000 // len(block))).encode()
    read = await within_guard(customer, data, recording, name="export.md")
    assert read.truncated and read.tokens <= 3000 and "Delivery" in read.text
    assert recording.longest <= 3000 * 32, recording.longest  # main: the whole rendered file


def test_the_knowledge_reader_reads_no_further_than_its_cap(tmp_path: Path) -> None:
    """A file still being written (here a FIFO fed without end): its size when looked at says
    nothing of what a read to the end would take. The reader stops one byte past the cap."""
    path = tmp_path / "growing.md"
    os.mkfifo(path)
    cap, written = 1 << 20, [0]

    def feed() -> None:
        chunk = b"# Notes\n\nMore text.\n" * 1000
        try:
            with path.open("wb") as fifo:
                while written[0] < 64 * cap:
                    fifo.write(chunk)
                    written[0] += len(chunk)
        except BrokenPipeError:
            pass

    feeder = threading.Thread(target=feed, daemon=True)
    feeder.start()
    with pytest.raises(UnreadableDocument) as refused:
        read_document(path, relative="growing.md", max_bytes=cap)
    feeder.join(HANG_GUARD)
    assert refused.value.kind == "too_big"
    assert written[0] < 2 * cap  # main: read to the end (64 MB), or refused as "empty" by its size
