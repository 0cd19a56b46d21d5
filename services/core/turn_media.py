"""What a customer's files add to one turn, once read: the images ready to send, a voice note's
transcript, a document's text. Plain records: the media readers make them, the window and the prompt
parts use them."""

from __future__ import annotations

from dataclasses import dataclass

from services.core.records import ImagePart, MediaRef


@dataclass(frozen=True, slots=True)
class DocumentText:
    """A customer's document as text within its token cap."""

    name: str
    """The file name as sent, safe for a prompt (printable, at most 80 characters)."""
    text: str
    """The extracted text, cut to the token cap (at a line break where possible)."""
    tokens: int
    """Tokens of ``text`` (TokenCounter.count_text)."""
    truncated: bool
    """Only the first part is in ``text`` (over the token cap, or over the PDF page cap)."""
    pages: int | None
    """A PDF's page count; None for the other types."""


@dataclass(frozen=True, slots=True)
class TurnImage:
    """An image ready to send: at its detail and, for a prompt it would not fit, at low detail."""

    part: ImagePart
    low: ImagePart
    file_unique_id: str


@dataclass(frozen=True, slots=True)
class TurnMedia:
    images: tuple[TurnImage, ...] = ()
    unsent_images: int = 0
    """Album photos past IMAGE_MAX_PER_TURN: named in the message, not sent."""
    transcript: str | None = None
    voice_kind: str = "voice message"
    document: DocumentText | None = None
    refs: tuple[MediaRef, ...] = ()
