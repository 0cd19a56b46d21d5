"""From what a customer sent to what the turn carries: limits checked before anything is
downloaded, then images shrunk to what the model uses, voice transcribed (once per file: the
transcript is kept by ``file_unique_id``), documents read within DOCUMENT_MAX_TOKENS.

The download is the bot's (``Download``): this module never sees a Telegram URL, so no URL with
the bot token in it can reach the model, a log line or the store from here."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from services.core import media_reasons as reasons
from services.core.errors import MediaError
from services.core.records import ImagePart, MediaRef
from services.core.tokens import TokenCounter
from services.core.turn_media import DocumentText, TurnImage, TurnMedia
from services.media.customer_documents import document_type, read_customer_document
from services.media.image_tokens import image_cost
from services.media.images import prepare_image
from services.media.pool import in_media_pool
from services.media.transcriber import Transcriber
from services.ports.media import MediaMemos
from services.settings import MediaSettings

IncomingKind = Literal["photo", "image_file", "voice", "audio", "video_note", "document"]
Download = Callable[[str, int], Awaitable[bytes]]
"""(file_id, max_bytes) → the file's bytes; refuses (MediaError TOO_BIG) a file over max_bytes."""

AUDIO_MAX_BYTES = 25 * 1024 * 1024
"""The provider's limit for one transcription upload."""
_AUDIO_SUFFIXES = {
    "audio/ogg": "ogg",
    "audio/opus": "ogg",
    "audio/mpeg": "mp3",
    "audio/mp3": "mp3",
    "audio/mp4": "m4a",
    "audio/x-m4a": "m4a",
    "audio/m4a": "m4a",
    "audio/aac": "m4a",
    "audio/wav": "wav",
    "audio/x-wav": "wav",
    "audio/wave": "wav",
    "audio/flac": "flac",
    "audio/x-flac": "flac",
    "audio/webm": "webm",
    "video/mp4": "mp4",
}
_VOICE_KINDS = {"voice": "voice message", "audio": "audio file", "video_note": "video message"}


@dataclass(frozen=True, slots=True)
class Incoming:
    """One file of a message, as the update describes it (nothing downloaded yet)."""

    kind: IncomingKind
    file_id: str
    file_unique_id: str
    file_size: int | None = None
    duration: int | None = None
    mime_type: str | None = None
    file_name: str | None = None

    @property
    def family(self) -> reasons.MediaKind:
        if self.kind in ("photo", "image_file"):
            return "image"
        return "voice" if self.kind in _VOICE_KINDS else "document"


class MediaReader:
    def __init__(
        self,
        *,
        settings: MediaSettings,
        model: str,
        counter: TokenCounter,
        transcriber: Transcriber | None = None,
        memos: MediaMemos | None = None,
        vocabulary: Callable[[], str | None] = lambda: None,
        on_close: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self._on_close = on_close
        self._settings = settings
        self._model = model
        self._counter = counter
        self._transcriber = transcriber
        self._memos = memos
        self._vocabulary = vocabulary

    async def close(self) -> None:
        """Close the transcription client."""
        if self._on_close is not None:
            await self._on_close()

    def enabled(self, family: reasons.MediaKind) -> bool:
        settings = self._settings
        on = {"image": settings.images_enabled, "voice": settings.voice_enabled, "document": settings.documents_enabled}
        return on[family] and (family != "voice" or self._transcriber is not None)

    def check(self, items: Sequence[Incoming]) -> None:
        """Refuse before downloading: a kind turned off, a file over the size cap, a voice note too long,
        a document of a type not read."""
        for item in items:
            family = item.family
            if not self.enabled(family):
                raise MediaError(f"{item.kind} is turned off", kind=family, reason=reasons.OFF)
            cap = min(self._settings.media_max_bytes, AUDIO_MAX_BYTES if family == "voice" else 1 << 62)
            if item.file_size is not None and item.file_size > cap:
                raise MediaError(f"{item.file_size} bytes", kind=family, reason=reasons.TOO_BIG, limit=cap)
            limit = self._settings.voice_max_seconds
            if family == "voice" and item.duration is not None and item.duration > limit:
                raise MediaError(f"{item.duration} s", kind=family, reason=reasons.TOO_LONG, limit=limit)
            if family == "voice" and _audio_suffix(item) is None:
                raise MediaError(f"audio type {item.mime_type!r}", kind=family, reason=reasons.UNSUPPORTED)
            if family == "document" and document_type(item.file_name or "", item.mime_type) is None:
                raise MediaError(f"document type {item.mime_type!r}", kind=family, reason=reasons.UNSUPPORTED)

    async def read(self, chat_id: int, items: Sequence[Incoming], *, download: Download) -> TurnMedia:
        """What ``items`` add to the turn (``check`` first; MediaError for a file the bot cannot use)."""
        self.check(items)
        refs = tuple(MediaRef(item.kind, item.file_id) for item in items)
        images = [item for item in items if item.family == "image"]
        sent, unsent = images[: self._settings.image_max_per_turn], len(images) - self._settings.image_max_per_turn
        voice = next((item for item in items if item.family == "voice"), None)
        document = next((item for item in items if item.family == "document"), None)
        return TurnMedia(
            images=tuple([await self._image(item, download) for item in sent]),
            unsent_images=max(0, unsent),
            transcript=await self._transcript(chat_id, voice, download) if voice is not None else None,
            voice_kind=_VOICE_KINDS.get(voice.kind, "voice message") if voice is not None else "voice message",
            document=await self._document(document, download) if document is not None else None,
            refs=refs,
        )

    async def _image(self, item: Incoming, download: Download) -> TurnImage:
        data = await download(item.file_id, self._settings.media_max_bytes)
        settings = self._settings
        prepared = await in_media_pool(
            prepare_image, data, model=self._model, detail=settings.image_detail, rule=settings.image_tokens_rule
        )
        low_tokens = image_cost(
            prepared.width, prepared.height, model=self._model, detail="low", rule=settings.image_tokens_rule
        ).tokens
        return TurnImage(
            part=ImagePart(prepared.data_url, prepared.detail, prepared.tokens),
            low=ImagePart(prepared.data_url, "low", low_tokens),
            file_unique_id=item.file_unique_id,
        )

    async def _transcript(self, chat_id: int, item: Incoming, download: Download) -> str:
        if self._memos is not None:
            cached = await self._memos.get(chat_id, "transcript", item.file_unique_id)
            if cached is not None:
                return cached
        assert self._transcriber is not None  # enabled() checked it
        data = await download(item.file_id, min(self._settings.media_max_bytes, AUDIO_MAX_BYTES))
        suffix = _audio_suffix(item) or "ogg"
        transcript = await self._transcriber.transcribe(
            data, file_name=f"{item.kind}.{suffix}", mime_type=item.mime_type, prompt=self._vocabulary()
        )
        if self._memos is not None:
            await self._memos.put(chat_id, "transcript", item.file_unique_id, transcript.text)
        text: str = transcript.text
        return text

    async def _document(self, item: Incoming, download: Download) -> DocumentText:
        data = await download(item.file_id, self._settings.media_max_bytes)
        return await in_media_pool(
            read_customer_document,
            data,
            file_name=item.file_name or "document",
            mime_type=item.mime_type,
            max_tokens=self._settings.document_max_tokens,
            counter=self._counter,
            timeout=self._settings.document_timeout_seconds,
        )


def _audio_suffix(item: Incoming) -> str | None:
    if item.kind == "voice":
        return "ogg"  # Telegram's voice notes are OGG/Opus, sent as they come
    if item.kind == "video_note":
        return "mp4"
    name = (item.file_name or "").rsplit(".", 1)
    if len(name) == 2 and name[1].lower() in ("flac", "m4a", "mp3", "mp4", "mpeg", "mpga", "oga", "ogg", "wav", "webm"):
        return name[1].lower()
    return _AUDIO_SUFFIXES.get((item.mime_type or "").lower())
