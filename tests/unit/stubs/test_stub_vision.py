"""The stub model server takes image parts as OpenAI does: recorded, billed by the image-token rule,
refused with OpenAI's 400s (no vision, not an image, a URL instead of data)."""

from __future__ import annotations

import base64
import struct
import zlib
from collections.abc import AsyncIterator
from typing import Any

import openai
import pytest
from openai import AsyncOpenAI

from tests.stubs.openai_server import StubOpenAI, customer_texts
from tests.stubs.vision import image_size, images_in


def png(width: int, height: int) -> bytes:
    """A real PNG (black, 8-bit grey) built by hand: no imaging library in the tests."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    rows = b"".join(b"\x00" + b"\x00" * width for _ in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")


def jpeg_header(width: int, height: int) -> bytes:
    app0 = b"\xff\xe0" + struct.pack(">H", 16) + b"JFIF\x00\x01\x01\x00\x00\x01\x00\x01\x00\x00"
    sof = b"\xff\xc0" + struct.pack(">HBHHB", 11, 8, height, width, 1) + b"\x01\x11\x00"
    return b"\xff\xd8" + app0 + sof + b"\xff\xd9"


def data_url(data: bytes, mime: str = "image/png") -> str:
    return f"data:{mime};base64,{base64.b64encode(data).decode()}"


def photo_turn(url: str, detail: str = "high", text: str = "<customer_message>\nis it broken?\n</customer_message>"):  # type: ignore[no-untyped-def]
    parts: list[dict[str, Any]] = [{"type": "text", "text": text}]
    parts.append({"type": "image_url", "image_url": {"url": url, "detail": detail}})
    return [{"role": "system", "content": "You are support."}, {"role": "user", "content": parts}]


@pytest.fixture
async def client(stub_llm: StubOpenAI) -> AsyncIterator[AsyncOpenAI]:
    client = AsyncOpenAI(api_key="test-key", base_url=stub_llm.base_url, max_retries=0, timeout=10)
    yield client
    await client.close()


def test_image_sizes_are_read_from_the_headers() -> None:
    assert image_size(png(1024, 768)) == (1024, 768)
    assert image_size(jpeg_header(1800, 2400)) == (1800, 2400)
    assert image_size(b"GIF89a" + struct.pack("<HH", 640, 480) + b"\x00") == (640, 480)
    vp8x = (
        b"RIFF" + b"\x00" * 4 + b"WEBPVP8X" + b"\x00" * 8 + (1919).to_bytes(3, "little") + (1079).to_bytes(3, "little")
    )
    assert image_size(vp8x) == (1920, 1080)
    assert image_size(b"not an image at all") is None
    assert image_size(b"") is None


async def test_an_image_part_is_answered_recorded_and_billed(stub_llm: StubOpenAI, client: AsyncOpenAI) -> None:
    image = png(1024, 1024)
    messages = photo_turn(data_url(image))
    reply = await client.chat.completions.create(model="stub-chat", messages=messages)  # type: ignore[arg-type]
    assert reply.choices[0].message.content == "Support answer to: is it broken?"
    [body] = stub_llm.requests
    [seen] = images_in(body)
    assert (seen.data, seen.size, seen.detail, seen.mime) == (image, (1024, 1024), "high", "image/png")
    assert customer_texts(body) == ["is it broken?"]
    assert stub_llm.image_tokens == [765]  # billed by the gpt-4o tile rule
    text_only = await client.chat.completions.create(
        model="stub-chat", messages=[messages[0], {"role": "user", "content": messages[1]["content"][0]["text"]}]
    )
    assert reply.usage is not None and text_only.usage is not None
    assert reply.usage.prompt_tokens - text_only.usage.prompt_tokens == 765
    assert stub_llm.image_tokens == [765, 0]


async def test_low_detail_and_another_rule_bill_differently(stub_llm: StubOpenAI, client: AsyncOpenAI) -> None:
    await client.chat.completions.create(model="stub-chat", messages=photo_turn(data_url(png(1024, 1024)), "low"))  # type: ignore[arg-type]
    stub_llm.image_rule = "gpt-4.1-mini"
    url = data_url(jpeg_header(1800, 2400), "image/jpeg")
    await client.chat.completions.create(model="stub-chat", messages=photo_turn(url, "auto"))  # type: ignore[arg-type]
    assert stub_llm.image_tokens == [85, 2353]  # 1452 patches x 1.62, rounded up


async def test_the_same_image_again_is_a_cached_prefix(stub_llm: StubOpenAI, client: AsyncOpenAI) -> None:
    big = "<customer_message>\n" + "words " * 1200 + "\n</customer_message>"
    first = photo_turn(data_url(png(512, 512)), text=big)
    await client.chat.completions.create(model="stub-chat", messages=first)  # type: ignore[arg-type]
    await client.chat.completions.create(model="stub-chat", messages=first)  # type: ignore[arg-type]
    other = photo_turn(data_url(png(512, 513)), text=big)
    await client.chat.completions.create(model="stub-chat", messages=other)  # type: ignore[arg-type]
    assert stub_llm.cached_tokens[1] > 1024
    assert stub_llm.cached_tokens[2] < stub_llm.cached_tokens[1]  # the text is cached, the new image not


async def test_a_model_without_vision_refuses_images(stub_llm: StubOpenAI, client: AsyncOpenAI) -> None:
    stub_llm.vision = False
    with pytest.raises(openai.BadRequestError) as raised:
        await client.chat.completions.create(model="stub-chat", messages=photo_turn(data_url(png(8, 8))))  # type: ignore[arg-type]
    assert "image_url is only supported by certain models" in raised.value.message
    assert isinstance(raised.value.body, dict) and raised.value.body["param"] == "messages.[1].content.[1].type"
    text = await client.chat.completions.create(model="stub-chat", messages=[{"role": "user", "content": "hi"}])
    assert text.choices[0].message.content  # text still goes through
    assert len(stub_llm.cached_tokens) == len(stub_llm.requests) == len(stub_llm.image_tokens) == 2


@pytest.mark.parametrize(
    ("url", "code"),
    [
        (data_url(b"this is no image"), "invalid_image_format"),
        ("data:image/png;base64,@@@not-base64@@@", "invalid_image_format"),
        ("https://api.telegram.org/file/bot123456:SECRET/photos/file_1.jpg", "invalid_image_url"),
    ],
)
async def test_what_is_not_an_image_is_refused(stub_llm: StubOpenAI, client: AsyncOpenAI, url: str, code: str) -> None:
    with pytest.raises(openai.BadRequestError) as raised:
        await client.chat.completions.create(model="stub-chat", messages=photo_turn(url))  # type: ignore[arg-type]
    assert raised.value.code == code
    assert len(stub_llm.requests) == 1  # recorded all the same: a test can look for what was sent
