"""The customer's prompt part of every turn (text-only turns too): what the model gets this turn
(``turn_part``), what the history keeps (``stored_part``), and what media adds to them.

Pixels go to the model on the turn they arrive and never again; the stored message is text: the
image note, the transcript or the document's text (inside the customer's data fence like any text),
after a marker saying what it was, then the caption. ``refs`` keep Telegram's file ids.
"""

from __future__ import annotations

from services.core.prompt_format import customer_block
from services.core.records import PromptPart
from services.core.tokens import TokenCounter
from services.core.turn_media import TurnMedia


def remembered_text(caption: str, media: TurnMedia, notes: tuple[str, ...] = ()) -> str:
    """The customer message stored for the turn: a marker line per thing sent, then the caption."""
    lines: list[str] = []
    for index, _image in enumerate(media.images):
        note = notes[index].strip() if index < len(notes) else ""
        lines.append(f"[photo: {note}]" if note else "[photo]")
    if media.unsent_images:
        lines.append(f"[{media.unsent_images} more photo(s), not looked at]")
    if media.transcript is not None:
        lines.append(f"[{media.voice_kind}, transcribed]: {media.transcript}")
    if media.document is not None:
        document = media.document
        pages = f", {document.pages} pages" if document.pages else ""
        part = ", only the first part was read" if document.truncated else ""
        lines.append(f"[document {document.name}{pages}{part}]")
        lines.append(document.text)
    if caption:
        lines.append(caption)
    return "\n".join(lines)


def turn_part(counter: TokenCounter, text: str, media: TurnMedia | None, *, low: bool = False) -> PromptPart:
    """The new customer message as it goes to the model this turn: the text (markers without notes
    yet) and, when there are images, their parts (``low``: every image at low detail)."""
    content = customer_block(remembered_text(text, media) if media is not None else text)
    tokens = counter.count_message("user", content)
    if media is None or not media.images:
        return PromptPart("user", content, tokens)
    images = tuple(image.low if low else image.part for image in media.images)
    return PromptPart("user", content, tokens + sum(image.tokens for image in images), images=images)


def stored_part(counter: TokenCounter, text: str, media: TurnMedia | None, notes: tuple[str, ...]) -> PromptPart:
    """The customer message as the history keeps it: text only (notes instead of pixels)."""
    remembered = remembered_text(text, media, notes) if media is not None else text
    content = customer_block(remembered)
    return PromptPart("user", remembered, counter.count_message("user", content))
