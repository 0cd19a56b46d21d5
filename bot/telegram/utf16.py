"""Telegram measures text in UTF-16 code units (an emoji or other astral character counts 2)."""

from __future__ import annotations


def utf16_units(text: str) -> int:
    """How long Telegram considers ``text``."""
    return len(text.encode("utf-16-le")) // 2


def utf16_tail(text: str, limit: int) -> str:
    """The longest end of ``text`` of at most ``limit`` UTF-16 units; never half a character."""
    tail = text[-limit:] if limit > 0 else ""
    excess = utf16_units(tail) - limit
    start = 0
    while excess > 0:
        excess -= 2 if ord(tail[start]) > 0xFFFF else 1
        start += 1
    return tail[start:]
