"""A voice note to text through the provider's transcription endpoint (``audio.transcriptions``).

The audio goes as it came (Telegram's OGG/Opus is accepted; no re-encoding). Failures: unreachable,
timeouts, 429 and 5xx are LLMUnavailableError (the turn is retried, Retry-After kept), a refused
key or model LLMConfigurationError (engine.llm_errors), a format the provider does not decode, a
file too big or too long and an empty transcript MediaError. Over ``max_bytes`` nothing is sent.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any, Final

import openai
from openai import AsyncOpenAI

from services.core import media_reasons as reasons
from services.core.errors import LLMConfigurationError, LLMUnavailableError, MediaError
from services.knowledge.documents import squash
from services.llm.errors import incomplete_reply

MAX_BYTES: Final = 25 * 1024 * 1024
"""OpenAI's limit for one transcribed file."""
AUDIO_SUFFIXES: Final = {
    "audio/ogg": ".ogg",
    "audio/opus": ".ogg",
    "audio/mpeg": ".mp3",
    "audio/mp3": ".mp3",
    "audio/mp4": ".m4a",
    "audio/x-m4a": ".m4a",
    "audio/m4a": ".m4a",
    "audio/wav": ".wav",
    "audio/x-wav": ".wav",
    "audio/webm": ".webm",
    "audio/flac": ".flac",
    "video/mp4": ".mp4",
}
"""The suffix a file without a known one gets by its MIME type: the provider decides by the name."""
KNOWN_SUFFIXES: Final = frozenset({".flac", ".m4a", ".mp3", ".mp4", ".mpeg", ".mpga", ".oga", ".ogg", ".wav", ".webm"})
_FORMAT_WORDS: Final = ("invalid file format", "unsupported", "could not be decoded", "corrupt", "not a valid")
_LENGTH_WORDS: Final = ("too long", "duration", "longer than")


@dataclass(frozen=True, slots=True)
class Transcript:
    text: str
    seconds: float
    """Wall time of the call."""
    usage: dict[str, Any] | None
    """The response's usage as sent (seconds for whisper-1, tokens for the gpt-4o models), if any."""


def vocabulary_prompt(terms: Iterable[str], *, max_chars: int = 800) -> str | None:
    """A transcription prompt naming the product names and terms: "Glossary: A, B, C.". Each term
    squashed to one line, repeats dropped (case-insensitively), terms added while the prompt fits
    ``max_chars``; None when there is none."""
    seen: set[str] = set()
    kept: list[str] = []
    length = len("Glossary: .")
    for raw in terms:
        term = squash(" ".join(raw.split())).strip(" ,.")
        key = term.casefold()
        if not term or key in seen:
            continue
        extra = len(term) + (2 if kept else 0)
        if length + extra > max_chars:
            continue  # a shorter later term may still fit
        seen.add(key)
        kept.append(term)
        length += extra
    return f"Glossary: {', '.join(kept)}." if kept else None


def upload_name(file_name: str, mime_type: str | None) -> str:
    """The name as sent when its suffix is one the provider reads; else with the MIME type's suffix."""
    if PurePosixPath(file_name).suffix.lower() in KNOWN_SUFFIXES:
        return file_name
    suffix = AUDIO_SUFFIXES.get((mime_type or "").split(";", 1)[0].strip().lower())
    return f"{file_name or 'voice'}{suffix}" if suffix else file_name


def usage_of(result: object) -> dict[str, Any] | None:
    """The usage object of a transcription: typed in newer openai releases, an extra field in older
    ones (1.55.3 has ``text`` only); read from the model's dump either way."""
    to_dict = getattr(result, "to_dict", None)
    dumped = to_dict() if callable(to_dict) else None
    usage = dumped.get("usage") if isinstance(dumped, Mapping) else None
    return dict(usage) if isinstance(usage, Mapping) else None


def _message_of(exc: openai.APIStatusError) -> str:
    body = exc.body
    if isinstance(body, Mapping):
        error = body.get("error", body)
        if isinstance(error, Mapping) and isinstance(error.get("message"), str):
            return str(error["message"])
    return exc.message


class Transcriber:
    """Calls ``client.audio.transcriptions.create`` with ``model``; the client's own retries are off
    (max_retries=0): a transient failure is raised for the queue to retry the turn."""

    def __init__(self, *, client: AsyncOpenAI, model: str, timeout: float, max_bytes: int = MAX_BYTES) -> None:
        self._client = client
        self.model = model
        self._timeout = timeout
        self.max_bytes = max_bytes

    async def transcribe(
        self,
        audio: bytes,
        *,
        file_name: str,
        mime_type: str | None,
        prompt: str | None = None,
        language: str | None = None,
    ) -> Transcript:
        """The text of ``audio``; MediaError(kind="voice") when it cannot be, provider errors as above."""
        if len(audio) > self.max_bytes:
            raise MediaError(
                f"voice note of {len(audio)} bytes, over {self.max_bytes}",
                kind="voice",
                reason=reasons.TOO_BIG,
                limit=self.max_bytes,
            )
        if not audio:
            raise MediaError("voice note of 0 bytes", kind="voice", reason=reasons.UNREADABLE)
        name = upload_name(file_name, mime_type)
        options: dict[str, Any] = {}
        if prompt:
            options["prompt"] = prompt
        if language:
            options["language"] = language
        started = time.monotonic()
        try:
            result: object = await self._client.audio.transcriptions.create(
                model=self.model, file=(name, audio, mime_type), timeout=self._timeout, **options
            )
        except Exception as exc:
            error = self._translate(exc)
            if error is None:  # not a provider failure: a bug, raised as it is
                raise
            raise error from exc
        seconds = time.monotonic() - started
        text = result if isinstance(result, str) else getattr(result, "text", None)
        if not isinstance(text, str) or not text.strip():
            raise MediaError("the transcript is empty", kind="voice", reason=reasons.EMPTY)
        return Transcript(text=text.strip(), seconds=seconds, usage=usage_of(result))

    def _translate(self, exc: Exception) -> Exception | None:
        """The engine's error for a failed call; None when it is no provider failure (a bug)."""
        if isinstance(exc, openai.APIStatusError):
            status, message = exc.status_code, _message_of(exc)
            if status == 413:
                what = f"the provider refused the voice note as too big: {message}"[:300]
                return MediaError(what, kind="voice", reason=reasons.TOO_BIG)  # its limit unknown, not ours
            if status in (400, 415, 422):
                error = incomplete_reply(exc, mid_answer=False)
                if isinstance(error, LLMConfigurationError):  # a key or model code sent with a 400
                    return error
                lowered = message.lower()
                reason = (
                    reasons.UNSUPPORTED
                    if any(word in lowered for word in _FORMAT_WORDS)
                    else reasons.TOO_LONG
                    if any(word in lowered for word in _LENGTH_WORDS)
                    else reasons.NOT_UNDERSTOOD
                )
                what = f"the provider refused the voice note: HTTP {status}: {message}"[:300]
                return MediaError(what, kind="voice", reason=reason)
        error = incomplete_reply(exc, mid_answer=False)
        if error is None or isinstance(error, LLMUnavailableError):
            return error
        return MediaError(f"the transcription failed: {error}", kind="voice", reason=reasons.NOT_UNDERSTOOD)
