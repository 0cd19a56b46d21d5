import io
from pathlib import Path

from PIL import Image

from bot.cli.console import run_console
from services.backends.memory import InMemorySessionStore
from services.core.records import MediaRef
from services.core.tokens import TokenCounter
from services.llm.client import LLMClient
from services.media.reader import MediaReader
from services.settings import MediaSettings
from tests.helpers import customer_line, make_notes, make_service
from tests.stubs.openai_server import StubOpenAI
from tests.stubs.vision import images_in


async def test_console_prints_reply_and_memory_figures(
    stub_llm: StubOpenAI, llm: LLMClient, counter: TokenCounter
) -> None:
    service = make_service(store=InMemorySessionStore(), llm=llm, counter=counter)
    lines = ["order 7718 is late", *[customer_line(n) for n in range(14)], "/new", "hello again", "/quit"]
    out = io.StringIO()
    await run_console(service, chat_id=1, stdin=io.StringIO("\n".join(lines) + "\n"), stdout=out)
    text = out.getvalue()
    assert "bot> Support answer to: order 7718 is late" in text
    assert "[stored=2 sent_history=0 removed=0 tokens est=" in text
    assert "summary=updated" in text and " cached=0 " in text
    assert "(conversation reset)" in text
    last = text.strip().splitlines()[-2]
    assert last.startswith("[stored=2 ") and "summary=none" in last


def reader(counter: TokenCounter, **settings: object) -> MediaReader:
    return MediaReader(settings=MediaSettings(**settings), model="gpt-4o", counter=counter)  # type: ignore[arg-type]


async def test_console_sends_a_photo_and_a_file_as_a_customer_would(
    stub_llm: StubOpenAI, llm: LLMClient, counter: TokenCounter, tmp_path: Path
) -> None:
    """/photo and /file go through the bot's own media reader: the photo reaches the model as an
    image and is remembered by its note, the document's text is read, a refusal is told as the
    customer would hear it."""
    Image.new("RGB", (800, 600), (10, 120, 200)).save(tmp_path / "box photo.jpg", "JPEG")
    (tmp_path / "invoice.md").write_text("# Invoice 5521\n\nTotal: 84.20 EUR, paid by card.\n")
    (tmp_path / "big.txt").write_text("x" * 5000)
    stub_llm.image_note = lambda image: f"a blue box, {image.size}"
    store = InMemorySessionStore()
    service = make_service(store=store, llm=llm, counter=counter, budget=4000, notes=make_notes(llm, counter))
    lines = [
        f'/photo "{tmp_path / "box photo.jpg"}" it came like this',
        f"/file {tmp_path / 'invoice.md'}",
        "/photo",
        f"/file {tmp_path / 'missing.pdf'}",
        "/quit",
    ]
    out = io.StringIO()
    media = reader(counter)
    await run_console(service, chat_id=4, stdin=io.StringIO("\n".join(lines) + "\n"), stdout=out, media=media)
    text = out.getvalue()
    [photo_request, file_request] = [r for r in stub_llm.chat_requests if r not in stub_llm.note_requests]
    assert len(images_in(photo_request)) == 1 and "it came like this" in str(photo_request["messages"][-1])
    assert "Total: 84.20 EUR" in str(file_request["messages"][-1]) and images_in(file_request) == []
    stored = (await store.load(4)).messages
    assert stored[0].content == "[photo: a blue box, (800, 600)]\nit came like this"
    assert stored[0].media == (MediaRef("photo", "console:box photo.jpg"),)
    assert stored[2].media == (MediaRef("document", "console:invoice.md"),)
    assert "(/photo PATH [caption] sends a photo" in text, "a media command without a path gets its usage"
    assert "(cannot read " in text and "missing.pdf" in text

    capped = io.StringIO()
    await run_console(
        service,
        chat_id=5,
        stdin=io.StringIO(f"/file {tmp_path / 'big.txt'}\n"),
        stdout=capped,
        media=reader(counter, media_max_bytes=1000),
    )
    assert "(refused: document too_big; the customer would be told: " in capped.getvalue()
    assert (await store.load(5)).messages == ()
