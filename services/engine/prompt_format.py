"""How customer text and the summary are wrapped as data blocks, with tag break-outs neutralised.

Pure code. Stored messages keep the raw text; these functions render it for the prompt.
"""

from __future__ import annotations

import unicodedata

CUSTOMER_TAG = "customer_message"
SUMMARY_TAG = "conversation_summary"
KNOWLEDGE_TAG = "knowledge"
KNOWLEDGE_STATUS_TAG = "knowledge_status"
# Every tag any of our prompts uses as a data fence.
FENCE_TAGS = (
    CUSTOMER_TAG,
    SUMMARY_TAG,
    KNOWLEDGE_TAG,
    KNOWLEDGE_STATUS_TAG,
    "previous_summary",
    "conversation_turns",
    "support_reply",
)
_FENCE_KEYS = tuple(tag.replace("_", "") for tag in FENCE_TAGS)

_OPENERS = {"<", "＜", "﹤", "〈", "‹"}
_SAFE_OPENER = "‹"  # U+2039: reads like "<" to a person, is not a tag to the model's fences
_LOOKAHEAD = 80
# Characters an attacker can slip into a tag name without changing how a model reads it.
_INVISIBLE = (
    {"\u00ad", "\u180e", "\ufeff"}
    | {chr(c) for c in range(0x200B, 0x2010)}
    | {chr(c) for c in range(0x202A, 0x202F)}
    | {chr(c) for c in range(0x2060, 0x2070)}
)
_IGNORED_IN_NAME = {"/", "_", "-", " ", "\t", "\n", "\r", "\\"} | _INVISIBLE


def _looks_like_fence(text: str, start: int) -> bool:
    key: list[str] = []
    for ch in text[start + 1 : start + 1 + _LOOKAHEAD]:
        if ch in _IGNORED_IN_NAME:
            continue
        folded = unicodedata.normalize("NFKC", ch).casefold()
        if not folded.isalnum():
            break
        key.append(folded)
        candidate = "".join(key)
        if any(fence.startswith(candidate) for fence in _FENCE_KEYS):
            if candidate in _FENCE_KEYS:
                return True
            continue
        return False
    return False


def neutralize(text: str) -> str:
    """Defuse anything that could open or close one of our data fences, including look-alikes
    (full-width brackets, zero-width or RTL characters inside the tag name, odd case)."""
    if not any(opener in text for opener in _OPENERS):
        return text
    chars = list(text)
    for index, ch in enumerate(chars):
        if ch in _OPENERS and _looks_like_fence(text, index):
            chars[index] = _SAFE_OPENER
    return "".join(chars)


def clean_text(text: str) -> str:
    """Make text safe to encode: lone surrogates (invalid UTF-16 from clients) become U+FFFD."""
    if not _has_surrogates(text):
        return text
    return "".join("\ufffd" if 0xD800 <= ord(ch) <= 0xDFFF else ch for ch in text)


def _has_surrogates(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def wrap(tag: str, text: str) -> str:
    """``text`` as a data block: anything in it that could close or open one of our fences is defused."""
    return fence(tag, neutralize(text))


def fence(tag: str, safe_inner: str) -> str:
    """Put already-wrapped blocks inside an outer block (their own tags must stay intact)."""
    return f"<{tag}>\n{safe_inner}\n</{tag}>"


def customer_block(text: str) -> str:
    return wrap(CUSTOMER_TAG, text)


def summary_block(rendered_summary: str) -> str:
    return wrap(SUMMARY_TAG, rendered_summary)
