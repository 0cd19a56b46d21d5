"""A turn with images through the chat service, the real AsyncOpenAI and the stub model server:
pixels go once, the history keeps the note, a model without vision leaves nothing stored."""

import asyncio
import base64
import io
from typing import Any

import pytest
from PIL import Image

from services.backends.memory import InMemorySessionStore
from services.core import media_reasons as reasons
from services.core.errors import MediaError
from services.core.records import ImagePart, MediaRef
from services.core.tokens import TokenCounter
from services.core.turn_media import TurnImage, TurnMedia
from services.llm.client import LLMClient
from services.media.image_tokens import image_cost
from services.media.notes import ImageNotes
from tests.helpers import customer_line, make_notes, make_service
from tests.stubs.openai_server import StubOpenAI
from tests.stubs.vision import images_in


def photo(width: int = 640, height: int = 480, unique: str = "uq1", detail: str = "high") -> TurnImage:
    buffer = io.BytesIO()
    Image.new("RGB", (width, height), (200, 30, 30)).save(buffer, "JPEG")
    url = "data:image/jpeg;base64," + base64.b64encode(buffer.getvalue()).decode()
    part = ImagePart(url, detail, image_cost(width, height, model="gpt-4o", detail=detail).tokens)
    low = ImagePart(url, "low", image_cost(width, height, model="gpt-4o", detail="low").tokens)
    return TurnImage(part=part, low=low, file_unique_id=unique)


def with_photos(*images: TurnImage) -> TurnMedia:
    return TurnMedia(images=images, refs=tuple(MediaRef("photo", f"file-{i.file_unique_id}") for i in images))


async def noop(_result: object) -> None:
    return None


async def test_a_photo_is_sent_once_and_remembered_by_its_note(
    stub_llm: StubOpenAI, llm: LLMClient, counter: TokenCounter
) -> None:
    stub_llm.image_note = lambda _image: "monitor stand cracked at the base, box intact"
    store = InMemorySessionStore()
    service = make_service(store=store, llm=llm, counter=counter, notes=make_notes(llm, counter))
    await service.handle(3, "It arrived like this", deliver=noop, media=with_photos(photo()))
    reply_request = stub_llm.chat_requests[-1]
    [image] = images_in(reply_request)
    assert image.mime == "image/jpeg" and image.size == (640, 480) and image.detail == "high"
    assert len(stub_llm.note_requests) == 1
    [stored_user, _] = (await store.load(3)).messages
    assert stored_user.content == "[photo: monitor stand cracked at the base, box intact]\nIt arrived like this"
    assert stored_user.media == (MediaRef("photo", "file-uq1"),)
    assert stored_user.tokens == counter.count_message(
        "user", f"<customer_message>\n{stored_user.content}\n</customer_message>"
    )
    await service.handle(3, "Can you replace it?", deliver=noop)
    follow_up = stub_llm.chat_requests[-1]
    assert images_in(follow_up) == []
    assert "monitor stand cracked at the base" in str(follow_up["messages"])


async def test_the_note_survives_compaction(stub_llm: StubOpenAI, llm: LLMClient, counter: TokenCounter) -> None:
    stub_llm.image_note = lambda _image: "router model AX-3000 with a red LOS light"
    store = InMemorySessionStore()
    service = make_service(store=store, llm=llm, counter=counter, notes=make_notes(llm, counter), budget=1200)
    await service.handle(4, "Is this broken?", deliver=noop, media=with_photos(photo()))
    for n in range(25):
        await service.handle(4, customer_line(n), deliver=noop)
    session = await store.load(4)
    assert all("AX-3000" not in m.content for m in session.messages), "the photo's turn must have been folded"
    assert "AX-3000" in str(stub_llm.chat_requests[-1]["messages"])


async def test_a_model_without_vision_gets_a_clear_refusal_and_nothing_is_stored(
    stub_llm: StubOpenAI, llm: LLMClient, counter: TokenCounter
) -> None:
    stub_llm.vision = False
    store = InMemorySessionStore()
    service = make_service(store=store, llm=llm, counter=counter, notes=make_notes(llm, counter))
    with pytest.raises(MediaError) as refused:
        await service.handle(5, "look", deliver=noop, media=with_photos(photo()))
    assert refused.value.reason == reasons.NOT_UNDERSTOOD and refused.value.kind == "image"
    assert (await store.load(5)).messages == ()


async def test_images_without_room_go_at_low_detail_or_are_refused(
    stub_llm: StubOpenAI, llm: LLMClient, counter: TokenCounter
) -> None:
    store = InMemorySessionStore()
    big = photo(2000, 1500, detail="high")  # 765 tokens at high on gpt-4o, 85 at low
    notes = make_notes(llm, counter)
    service = make_service(store=store, llm=llm, counter=counter, budget=900, summary_max_tokens=100, notes=notes)
    await service.handle(6, "see", deliver=noop, media=with_photos(big))
    [image] = images_in(stub_llm.chat_requests[-1])
    assert image.detail == "low"
    [noted] = images_in(stub_llm.note_requests[-1])
    assert noted.detail == "low", "the note is asked with the images the reply got"
    many = with_photos(*(photo(unique=f"u{i}", detail="low") for i in range(10)))  # 850 tokens even at low
    with pytest.raises(MediaError) as refused:
        await service.handle(6, "and these", deliver=noop, media=many)
    assert refused.value.reason == reasons.NO_ROOM
    assert len((await store.load(6)).messages) == 2


async def test_a_failed_note_leaves_a_marker_and_the_turn_stands(
    stub_llm: StubOpenAI, llm: LLMClient, counter: TokenCounter
) -> None:
    def no_note(_image: object) -> str:
        raise RuntimeError("the stub's describer broke")

    stub_llm.image_note = no_note  # the stub answers the note request with a 500
    store = InMemorySessionStore()
    service = make_service(store=store, llm=llm, counter=counter, notes=make_notes(llm, counter))
    result = await service.handle(7, "what is this", deliver=noop, media=with_photos(photo()))
    assert result.reply.startswith("Support answer to:")
    [stored_user, _] = (await store.load(7)).messages
    assert stored_user.content == "[photo]\nwhat is this"


async def test_the_reply_waits_for_a_late_image_note_only_so_long(
    stub_llm: StubOpenAI, llm: LLMClient, counter: TokenCounter
) -> None:
    """A note slower than the reply (a slow or retried note call) holds the reply back at most
    ``note_wait``; the history then keeps "[photo]"."""
    delivered = asyncio.Event()

    class SlowNotes(ImageNotes):
        async def describe(self, *args: Any, **kwargs: Any) -> tuple[str, ...]:
            await delivered.wait()  # a note slower than the reply (a slow or retried note call)
            return await super().describe(*args, **kwargs)

    async def deliver(_result: object) -> None:
        delivered.set()

    notes = SlowNotes(llm=llm, counter=counter, instruction="notes", role="system")
    store = InMemorySessionStore()
    service = make_service(store=store, llm=llm, counter=counter, notes=notes, note_wait=0.3)
    turn = asyncio.ensure_future(service.handle(8, "what is this", deliver=deliver, media=with_photos(photo())))
    done, _ = await asyncio.wait([turn], timeout=5)  # a guard: the reply takes milliseconds
    if not done:
        delivered.set()
        await turn
    assert done, "the reply was held back until the note came"
    assert (await store.load(8)).messages[0].content == "[photo]\nwhat is this"
