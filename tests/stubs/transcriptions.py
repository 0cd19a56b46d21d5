"""``POST /v1/audio/transcriptions`` of the stub model server, in OpenAI's shape.

Multipart ``file``, ``model`` and optional ``prompt``, ``language``, ``response_format`` (json, the
default: ``{"text", "usage"}``; text: the bare transcript). The transcript comes from ``replies`` (one
per call), else ``texts`` (audio bytes → text), else ``default_text``. Every call is recorded (bytes,
file name, model, prompt, outcome). Faults as OpenAI answers them: ``error`` (500), ``unsupported``
(400 "Invalid file format", also for a file name whose extension OpenAI does not take), ``hang``,
``throttled`` (429, Retry-After: 7), ``unauthorized`` (401 invalid_api_key), ``too_long`` (400, over
the model's duration); over 25 MB is refused with 413 as OpenAI does.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Literal

from aiohttp import web

FORMATS = ("flac", "m4a", "mp3", "mp4", "mpeg", "mpga", "oga", "ogg", "wav", "webm")
"""The file types OpenAI's transcription endpoint accepts (by the file name's extension)."""
MAX_BYTES = 25 * 1024 * 1024
Outcome = Literal["ok", "error", "unsupported", "hang", "throttled", "unauthorized", "too_long"]


@dataclass
class TranscriptionCall:
    file: bytes
    filename: str
    content_type: str
    model: str
    prompt: str | None
    language: str | None
    response_format: str
    outcome: str
    at: float = field(default_factory=time.monotonic)


@dataclass
class StubTranscriptions:
    mode: Outcome = "ok"
    """How every call goes unless ``outcomes`` says otherwise for the next ones."""
    outcomes: deque[Outcome] = field(default_factory=deque)
    replies: deque[str] = field(default_factory=deque)
    texts: dict[bytes, str] = field(default_factory=dict)
    default_text: str = "Hello, my order has not arrived yet."
    calls: list[TranscriptionCall] = field(default_factory=list)
    _stopping: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def paid(self) -> list[TranscriptionCall]:
        """The calls that returned a transcript (what a provider bills)."""
        return [c for c in self.calls if c.outcome == "ok"]

    def stop(self) -> None:
        self._stopping.set()

    async def handle(self, request: web.Request) -> web.StreamResponse:
        if request.content_length is not None and request.content_length > MAX_BYTES:
            message = f"Maximum content size limit ({MAX_BYTES}) exceeded ({request.content_length} bytes read)"
            return _error(413, message, "invalid_request_error")
        form = await request.post()
        upload = form.get("file")
        if upload is None or isinstance(upload, str):
            return _error(400, "you must provide a file", "invalid_request_error", param="file")
        fields = {key: str(value) for key, value in form.items() if isinstance(value, str)}
        call = self._record(upload, fields)
        if call.outcome == "hang":
            await self._stopping.wait()
            return _error(503, "stub stopping", "server_error")
        fault = _fault(call.outcome)
        if fault is not None:
            return fault
        text = self.replies.popleft() if self.replies else self.texts.get(call.file, self.default_text)
        if call.response_format == "text":
            return web.Response(text=text + "\n", content_type="text/plain")
        return web.json_response({"text": text, "usage": self._usage(call, text)})

    def _record(self, upload: web.FileField, fields: dict[str, str]) -> TranscriptionCall:
        """The call, recorded, with its outcome (``outcomes``, else ``mode``; a file type OpenAI does
        not take is unsupported)."""
        data = upload.file.read()
        outcome: Outcome = self.outcomes.popleft() if self.outcomes else self.mode
        extension = upload.filename.rsplit(".", 1)[-1].lower() if "." in upload.filename else ""
        if outcome == "ok" and extension not in FORMATS:
            outcome = "unsupported"
        call = TranscriptionCall(
            file=data,
            filename=upload.filename,
            content_type=upload.content_type,
            model=fields.get("model", ""),
            prompt=fields.get("prompt"),
            language=fields.get("language"),
            response_format=fields.get("response_format", "json"),
            outcome=outcome,
        )
        self.calls.append(call)
        return call

    @staticmethod
    def _usage(call: TranscriptionCall, text: str) -> dict[str, Any]:
        """Usage as OpenAI reports it: seconds for whisper-1, tokens for the gpt-4o transcribe models
        (the stub's audio tokens are a stand-in: one per 100 bytes)."""
        if call.model.startswith("whisper"):
            return {"type": "duration", "seconds": max(1, len(call.file) // 4000)}
        audio, prompt, output = max(1, len(call.file) // 100), len((call.prompt or "").split()), len(text.split())
        return {
            "type": "tokens",
            "input_tokens": audio + prompt,
            "input_token_details": {"text_tokens": prompt, "audio_tokens": audio},
            "output_tokens": output,
            "total_tokens": audio + prompt + output,
        }


def _fault(outcome: str) -> web.Response | None:
    """The error OpenAI answers for a failing ``outcome``; None for "ok"."""
    if outcome == "error":
        return _error(500, "The server had an error while processing your request. Sorry about that!")
    if outcome == "unsupported":
        message = f"Invalid file format. Supported formats: {list(FORMATS)}"
        return _error(400, message, "invalid_request_error")
    if outcome == "throttled":
        return _error(429, "Rate limit reached for requests", "requests", headers={"retry-after": "7"})
    if outcome == "unauthorized":
        return _error(401, "Incorrect API key provided: sk-***", "invalid_request_error", code="invalid_api_key")
    if outcome == "too_long":
        message = "audio duration 1612.5 seconds is longer than 1500 seconds which is the maximum for this model"
        return _error(400, message, "invalid_request_error")
    return None


def _error(
    status: int,
    message: str,
    kind: str = "server_error",
    param: str | None = None,
    *,
    code: str | None = None,
    headers: dict[str, str] | None = None,
) -> web.Response:
    body = {"error": {"message": message, "type": kind, "param": param, "code": code}}
    return web.json_response(body, status=status, headers=headers)
