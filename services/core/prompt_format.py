"""How customer text and the summary are wrapped as data blocks, with tag break-outs neutralised.

Pure code. Stored messages keep the raw text; these functions render it for the prompt.
"""

from __future__ import annotations

from services.core.confusables import OPENERS, readings

CUSTOMER_TAG = "customer_message"
SUMMARY_TAG = "conversation_summary"
KNOWLEDGE_TAG = "knowledge"
KNOWLEDGE_STATUS_TAG = "knowledge_status"
TOOL_RESULT_TAG = "tool_result"
ACTIONS_TAG = "actions_done"
# Every tag any of our prompts uses as a data fence.
FENCE_TAGS = (
    CUSTOMER_TAG,
    SUMMARY_TAG,
    KNOWLEDGE_TAG,
    KNOWLEDGE_STATUS_TAG,
    TOOL_RESULT_TAG,
    ACTIONS_TAG,
    "previous_summary",
    "conversation_turns",
    "support_reply",
)
_FENCE_KEYS = tuple(tag.replace("_", "") for tag in FENCE_TAGS)

_SAFE_OPENER = "‹"  # U+2039: reads like "<" to a person, is not a tag to the model's fences
_LOOKAHEAD = 80
_LT_ENTITIES = ("&lt;", "&#60;", "&#060;", "&#x3c;", "&#x03c;")
_PREFIXES = frozenset(key[:n] for key in _FENCE_KEYS for n in range(1, len(key) + 1))


def _looks_like_fence(text: str, start: int) -> bool:
    """Does a fence name follow the opener at ``start``? Each character may be read several ways (a
    capital I as "i" or "l"), so the candidates are the set of fence-name prefixes still possible:
    at most a few dozen, each character looked at once, at most ``_LOOKAHEAD`` characters."""
    candidates = {""}
    for ch in text[start + 1 : start + 1 + _LOOKAHEAD]:
        ways = readings(ch)
        if ways is None:
            continue
        candidates = {c + way for c in candidates for way in ways if c + way in _PREFIXES}
        if not candidates:
            return False
        if not candidates.isdisjoint(_FENCE_KEYS):
            return True
    return False


def neutralize(text: str) -> str:
    """Defuse anything that could open or close one of our data fences, including look-alikes:
    NFKC forms (fullwidth, small and mathematical characters), confusables.txt look-alikes of "<",
    "/", "-" and of the names' letters (a Cyrillic "о", a capital "I" for an "l"), zero-width, bidi,
    combining or space characters inside the name, odd case. Only the opener changes."""
    text = _defuse_entities(text)
    if OPENERS.isdisjoint(text):
        return text
    chars = list(text)
    for index, ch in enumerate(chars):
        if ch in OPENERS and _looks_like_fence(text, index):
            chars[index] = _SAFE_OPENER
    return "".join(chars)


def _defuse_entities(text: str) -> str:
    """An HTML entity of "<" (``&lt;``, ``&#60;``, ``&#x3c;``) before a fence name reads as a tag to a
    model that has seen HTML: it becomes the safe opener too. One pass over the "&"s (linear)."""
    if "&" not in text:
        return text
    lowered = text.lower()
    pieces: list[str] = []
    done = at = 0
    while (at := lowered.find("&", at)) != -1:
        entity = next((e for e in _LT_ENTITIES if lowered.startswith(e, at)), None)
        if entity is not None and _looks_like_fence(text, at + len(entity) - 1):
            pieces += [text[done:at], _SAFE_OPENER]
            done = at + len(entity)
        at += 1
    return "".join(pieces) + text[done:] if pieces else text


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


def tool_result_block(text: str) -> str:
    """What a tool returned, as the data block of its ``tool`` message (fences and look-alikes defused)."""
    return wrap(TOOL_RESULT_TAG, text)


def with_actions(reply: str, lines: tuple[str, ...]) -> str:
    """A stored reply as later prompts show it: the lines of the actions its turn took first, as a
    short data block (none: the reply unchanged)."""
    if not lines:
        return reply
    return f"{wrap(ACTIONS_TAG, chr(10).join(lines))}\n{reply}"
