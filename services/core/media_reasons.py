"""Why a photo, voice note or document was refused: the ``MediaError.reason`` values, each one text
the bot says (bot.telegram.texts ``media_<reason>``)."""

from __future__ import annotations

from typing import Final, Literal

MediaKind = Literal["image", "voice", "document"]

TOO_BIG: Final = "too_big"
"""Over a byte limit (Telegram's 20 MB getFile limit, the provider's 25 MB audio limit)."""
TOO_LONG: Final = "too_long"
"""A voice note or audio over VOICE_MAX_SECONDS."""
UNREADABLE: Final = "unreadable"
"""Empty, corrupt or truncated: the bytes are not what the file says it is."""
UNSUPPORTED: Final = "unsupported"
"""A format or codec the bot (or the provider) does not read."""
ENCRYPTED: Final = "encrypted"
"""A password-protected document."""
EMPTY: Final = "empty"
"""Readable but without text (a scanned PDF, a silent voice note)."""
NO_ROOM: Final = "no_room"
"""The images leave the prompt no room even at low detail (too many or too large at once)."""
NOT_UNDERSTOOD: Final = "not_understood"
"""The model's endpoint refused the image or audio input itself (a model without vision, a 400)."""
TOO_COMPLEX: Final = "too_complex"
"""A document that would cost more work, time or memory to read than one is allowed (a PDF bomb)."""
OFF: Final = "off"
"""This kind of media is turned off by the operator."""

REASONS: Final = (
    TOO_BIG,
    TOO_LONG,
    UNREADABLE,
    UNSUPPORTED,
    ENCRYPTED,
    EMPTY,
    TOO_COMPLEX,
    NO_ROOM,
    NOT_UNDERSTOOD,
    OFF,
)
