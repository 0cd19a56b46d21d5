"""The Transcriber with the real AsyncOpenAI against the stub's /audio/transcriptions: what is sent,
what comes back, and each failure as the error the queue and the customer act on."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import pytest
from openai import AsyncOpenAI

from services.core import media_reasons as reasons
from services.core.errors import LLMConfigurationError, LLMUnavailableError, MediaError
from services.media.transcriber import Transcriber, upload_name, usage_of, vocabulary_prompt
from tests.stubs import transcriptions as stub_module
from tests.stubs.openai_server import StubOpenAI

OGG = b"OggS\x00\x02" + bytes(range(256)) * 8


@pytest.fixture
async def client(stub_llm: StubOpenAI) -> AsyncIterator[AsyncOpenAI]:
    client = AsyncOpenAI(api_key="test-key", base_url=stub_llm.base_url, max_retries=0, timeout=10)
    yield client
    await client.close()


@pytest.fixture
def transcriber(client: AsyncOpenAI) -> Transcriber:
    return Transcriber(client=client, model="gpt-4o-mini-transcribe", timeout=5)


async def voice(transcriber: Transcriber, audio: bytes = OGG, **kw: str | None) -> MediaError:
    with pytest.raises(MediaError) as raised:
        await transcriber.transcribe(audio, file_name="voice.ogg", mime_type="audio/ogg", **kw)
    assert raised.value.kind == "voice"
    return raised.value


async def test_a_voice_note_is_sent_as_it_came_and_its_text_returned(
    stub_llm: StubOpenAI, transcriber: Transcriber
) -> None:
    stub_llm.transcriptions.replies.append("  Where is my order 1234?\n")
    started = time.monotonic()
    result = await transcriber.transcribe(
        OGG, file_name="voice.ogg", mime_type="audio/ogg", prompt="Glossary: WidgetPro.", language="en"
    )
    assert result.text == "Where is my order 1234?"
    assert 0 < result.seconds <= time.monotonic() - started
    [call] = stub_llm.transcriptions.calls
    assert (call.file, call.filename, call.content_type) == (OGG, "voice.ogg", "audio/ogg")
    assert (call.model, call.prompt, call.language, call.response_format) == (
        "gpt-4o-mini-transcribe", "Glossary: WidgetPro.", "en", "json",
    )  # fmt: skip
    assert result.usage is not None and result.usage["type"] == "tokens"
    assert result.usage["input_token_details"] == {"text_tokens": 2, "audio_tokens": 20}


async def test_no_prompt_nor_language_is_sent_when_none_is_given(stub_llm: StubOpenAI, client: AsyncOpenAI) -> None:
    whisper = Transcriber(client=client, model="whisper-1", timeout=5)
    result = await whisper.transcribe(OGG, file_name="audio.mp3", mime_type=None)
    assert result.text == stub_llm.transcriptions.default_text
    assert result.usage == {"type": "duration", "seconds": 1}  # whisper-1 reports seconds
    [call] = stub_llm.transcriptions.calls
    assert (call.model, call.prompt, call.language, call.filename) == ("whisper-1", None, None, "audio.mp3")


async def test_a_name_without_a_known_suffix_gets_the_mimes(stub_llm: StubOpenAI, transcriber: Transcriber) -> None:
    await transcriber.transcribe(OGG, file_name="file_42", mime_type="audio/ogg")
    assert stub_llm.transcriptions.calls[0].filename == "file_42.ogg"
    assert upload_name("", "audio/mpeg") == "voice.mp3" and upload_name("Voice.OGA", "audio/ogg") == "Voice.OGA"
    assert upload_name("clip.amr", "audio/amr") == "clip.amr"  # nothing known: the provider decides


async def test_a_server_error_is_transient(stub_llm: StubOpenAI, transcriber: Transcriber) -> None:
    stub_llm.transcriptions.outcomes.append("error")
    with pytest.raises(LLMUnavailableError) as raised:
        await transcriber.transcribe(OGG, file_name="voice.ogg", mime_type="audio/ogg")
    assert raised.value.status == 500 and not isinstance(raised.value, LLMConfigurationError)
    assert (await transcriber.transcribe(OGG, file_name="voice.ogg", mime_type="audio/ogg")).text


async def test_a_429_is_transient_and_keeps_the_retry_after(stub_llm: StubOpenAI, transcriber: Transcriber) -> None:
    stub_llm.transcriptions.mode = "throttled"
    with pytest.raises(LLMUnavailableError) as raised:
        await transcriber.transcribe(OGG, file_name="voice.ogg", mime_type="audio/ogg")
    assert (raised.value.status, raised.value.retry_after) == (429, 7.0)


async def test_a_hanging_call_times_out_as_transient(stub_llm: StubOpenAI, client: AsyncOpenAI) -> None:
    stub_llm.transcriptions.mode = "hang"
    quick = Transcriber(client=client, model="whisper-1", timeout=0.3)
    started = time.monotonic()
    with pytest.raises(LLMUnavailableError) as raised:
        await quick.transcribe(OGG, file_name="voice.ogg", mime_type="audio/ogg")
    assert raised.value.status is None and time.monotonic() - started < 5  # the client's 10 s is not used
    assert [c.outcome for c in stub_llm.transcriptions.calls] == ["hang"]


async def test_an_unreachable_provider_is_transient() -> None:
    client = AsyncOpenAI(api_key="k", base_url="http://127.0.0.1:9/v1", max_retries=0)
    try:
        with pytest.raises(LLMUnavailableError):
            await Transcriber(client=client, model="whisper-1", timeout=2).transcribe(
                OGG, file_name="voice.ogg", mime_type="audio/ogg"
            )
    finally:
        await client.close()


async def test_a_rejected_key_is_a_configuration_error(stub_llm: StubOpenAI, transcriber: Transcriber) -> None:
    stub_llm.transcriptions.mode = "unauthorized"
    with pytest.raises(LLMConfigurationError) as raised:
        await transcriber.transcribe(OGG, file_name="voice.ogg", mime_type="audio/ogg")
    assert raised.value.status == 401


async def test_a_format_the_provider_cannot_decode_is_unsupported(
    stub_llm: StubOpenAI, transcriber: Transcriber
) -> None:
    stub_llm.transcriptions.mode = "unsupported"  # an OGG whose codec the provider cannot decode
    error = await voice(transcriber)
    assert error.reason == reasons.UNSUPPORTED and "Invalid file format" in str(error)
    stub_llm.transcriptions.mode = "ok"
    with pytest.raises(MediaError) as raised:  # a suffix OpenAI does not take
        await transcriber.transcribe(b"#!AMR\n", file_name="voice.amr", mime_type="audio/amr")
    assert raised.value.reason == reasons.UNSUPPORTED
    assert stub_llm.transcriptions.paid == []


async def test_audio_over_the_models_duration_is_too_long(stub_llm: StubOpenAI, transcriber: Transcriber) -> None:
    stub_llm.transcriptions.mode = "too_long"
    assert (await voice(transcriber)).reason == reasons.TOO_LONG


async def test_over_max_bytes_is_refused_before_any_request(stub_llm: StubOpenAI, client: AsyncOpenAI) -> None:
    small = Transcriber(client=client, model="whisper-1", timeout=5, max_bytes=len(OGG) - 1)
    error = await voice(small)
    assert (error.reason, error.limit) == (reasons.TOO_BIG, len(OGG) - 1)
    assert (await voice(small, b"")).reason == reasons.UNREADABLE
    assert stub_llm.transcriptions.calls == []


async def test_the_providers_413_is_too_big(
    stub_llm: StubOpenAI, transcriber: Transcriber, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(stub_module, "MAX_BYTES", len(OGG) // 2)  # a provider with a lower limit than ours
    error = await voice(transcriber)
    assert (error.reason, error.limit) == (reasons.TOO_BIG, None)  # the provider's limit, not known
    assert stub_llm.transcriptions.calls == []


@pytest.mark.parametrize("text", ["", "  \n\t "])
async def test_an_empty_transcript_is_empty(stub_llm: StubOpenAI, transcriber: Transcriber, text: str) -> None:
    stub_llm.transcriptions.replies.append(text)
    assert (await voice(transcriber)).reason == reasons.EMPTY
    assert len(stub_llm.transcriptions.paid) == 1  # the provider answered (and bills it)


def test_usage_is_read_typed_or_as_an_extra_field_and_none_without_it() -> None:
    from openai.types.audio import Transcription

    with_usage = Transcription.model_validate({"text": "hi", "usage": {"type": "duration", "seconds": 3}})
    assert usage_of(with_usage) == {"type": "duration", "seconds": 3}
    assert usage_of(Transcription.model_validate({"text": "hi"})) is None
    assert usage_of("plain text") is None


def test_the_vocabulary_prompt_names_each_term_once_within_the_cap() -> None:
    terms = ["WidgetPro", " Acme\nCloud ", "widgetpro", "", "  ", "X-200,", "WIDGETPRO"]
    assert vocabulary_prompt(terms) == "Glossary: WidgetPro, Acme Cloud, X-200."
    assert vocabulary_prompt([]) is None and vocabulary_prompt(["", " . "]) is None
    many = [f"Product{n:03d}" for n in range(500)]
    prompt = vocabulary_prompt(many, max_chars=100)
    assert prompt is not None and len(prompt) <= 100 and prompt.startswith("Glossary: Product000, Product001")
    assert prompt.endswith(".") and prompt.count(",") == len(prompt[len("Glossary: ") : -1].split(", ")) - 1
    assert vocabulary_prompt(["x" * 200, "Short"], max_chars=50) == "Glossary: Short."
