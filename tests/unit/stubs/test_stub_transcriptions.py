"""The stub model server's /audio/transcriptions, called by a real AsyncOpenAI as the bot will call it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import openai
import pytest
from openai import AsyncOpenAI
from openai.types.audio import Transcription

from tests.stubs.openai_server import StubOpenAI
from tests.stubs.transcriptions import FORMATS, MAX_BYTES

OGG = b"OggS\x00\x02" + bytes(range(256)) * 8


def usage_of(result: Transcription) -> dict[str, Any]:
    """The transcription's usage as sent. openai 1.55.3 (the lowest allowed) has no typed ``Transcription.usage`` (the
    field is a dict extra there), so read it from the dump; where the SDK types it, it must parse."""
    usage = result.to_dict()["usage"]
    if "usage" in Transcription.model_fields:
        typed = getattr(result, "usage", None)
        assert typed is not None and typed.type == usage["type"]
    return usage  # type: ignore[no-any-return]


@pytest.fixture
async def client(stub_llm: StubOpenAI) -> AsyncIterator[AsyncOpenAI]:
    client = AsyncOpenAI(api_key="test-key", base_url=stub_llm.base_url, max_retries=0, timeout=10)
    yield client
    await client.close()


async def test_a_voice_note_is_transcribed_and_the_call_recorded(stub_llm: StubOpenAI, client: AsyncOpenAI) -> None:
    stub_llm.transcriptions.replies.append("Where is my order 1234?")
    result = await client.audio.transcriptions.create(
        model="gpt-4o-mini-transcribe", file=("voice.ogg", OGG, "audio/ogg"), prompt="Acme, WidgetPro"
    )
    assert result.text == "Where is my order 1234?"
    [call] = stub_llm.transcriptions.calls
    assert (call.file, call.filename, call.content_type) == (OGG, "voice.ogg", "audio/ogg")
    assert (call.model, call.prompt, call.response_format, call.outcome) == (
        "gpt-4o-mini-transcribe", "Acme, WidgetPro", "json", "ok",
    )  # fmt: skip
    assert usage_of(result) == {
        "type": "tokens", "input_tokens": 22, "input_token_details": {"text_tokens": 2, "audio_tokens": 20},
        "output_tokens": 5, "total_tokens": 27,
    }  # fmt: skip
    assert stub_llm.transcriptions.paid == [call]
    assert stub_llm.requests == []  # no chat request: transcription is its own endpoint


async def test_the_transcript_comes_from_the_audio_or_the_default(stub_llm: StubOpenAI, client: AsyncOpenAI) -> None:
    stub_llm.transcriptions.texts[b"OggS-refund"] = "I want a refund"
    refund = await client.audio.transcriptions.create(model="whisper-1", file=("a.oga", b"OggS-refund", "audio/ogg"))
    other = await client.audio.transcriptions.create(model="whisper-1", file=("b.oga", b"OggS-other", "audio/ogg"))
    assert (refund.text, other.text) == ("I want a refund", stub_llm.transcriptions.default_text)
    assert usage_of(refund) == usage_of(other) == {"type": "duration", "seconds": 1}
    assert [c.prompt for c in stub_llm.transcriptions.calls] == [None, None]


async def test_response_format_text_is_the_bare_transcript(stub_llm: StubOpenAI, client: AsyncOpenAI) -> None:
    stub_llm.transcriptions.replies.append("just text")
    text = await client.audio.transcriptions.create(
        model="gpt-4o-transcribe", file=("voice.ogg", OGG, "audio/ogg"), response_format="text", language="en"
    )
    assert isinstance(text, str) and text.strip() == "just text"
    assert (stub_llm.transcriptions.calls[0].response_format, stub_llm.transcriptions.calls[0].language) == (
        "text", "en",
    )  # fmt: skip


async def test_a_server_error_is_a_500(stub_llm: StubOpenAI, client: AsyncOpenAI) -> None:
    stub_llm.transcriptions.outcomes.append("error")
    with pytest.raises(openai.InternalServerError) as raised:
        await client.audio.transcriptions.create(model="whisper-1", file=("voice.ogg", OGG, "audio/ogg"))
    assert raised.value.status_code == 500
    ok = await client.audio.transcriptions.create(model="whisper-1", file=("voice.ogg", OGG, "audio/ogg"))
    assert ok.text  # the next call goes through: outcomes are per call
    assert [c.outcome for c in stub_llm.transcriptions.calls] == ["error", "ok"]
    assert len(stub_llm.transcriptions.paid) == 1


async def test_an_unsupported_format_is_openais_400(stub_llm: StubOpenAI, client: AsyncOpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as raised:  # by the file name's extension, as OpenAI decides
        await client.audio.transcriptions.create(model="whisper-1", file=("voice.amr", b"#!AMR", "audio/amr"))
    assert raised.value.status_code == 400 and "Invalid file format" in raised.value.message
    assert isinstance(raised.value.body, dict) and raised.value.body["type"] == "invalid_request_error"
    stub_llm.transcriptions.mode = "unsupported"  # e.g. an OGG whose codec the provider cannot decode
    with pytest.raises(openai.BadRequestError):
        await client.audio.transcriptions.create(model="whisper-1", file=("voice.ogg", OGG, "audio/ogg"))
    assert stub_llm.transcriptions.paid == []
    assert "ogg" in FORMATS and "oga" in FORMATS


async def test_a_hanging_transcription_times_out(stub_llm: StubOpenAI) -> None:
    stub_llm.transcriptions.mode = "hang"
    client = AsyncOpenAI(api_key="k", base_url=stub_llm.base_url, max_retries=0, timeout=0.5)
    try:
        with pytest.raises(openai.APITimeoutError):
            await client.audio.transcriptions.create(model="whisper-1", file=("voice.ogg", OGG, "audio/ogg"))
    finally:
        await client.close()
    assert [c.outcome for c in stub_llm.transcriptions.calls] == ["hang"]


async def test_a_file_over_25_mb_is_refused(stub_llm: StubOpenAI, client: AsyncOpenAI) -> None:
    with pytest.raises(openai.APIStatusError) as raised:
        await client.audio.transcriptions.create(
            model="whisper-1", file=("voice.ogg", b"\x00" * (MAX_BYTES + 1), "audio/ogg")
        )
    assert raised.value.status_code == 413
    assert stub_llm.transcriptions.calls == []
