"""The model's ``handoff_to_operator`` tool call read as the reason the conversation goes to a human."""

from __future__ import annotations

import json

from prompts.support_chat import HANDOFF_TOOL
from services.core.prompt_format import clean_text


def handoff_reason(name: str, arguments: str) -> str | None:
    """The reason of a ``handoff_to_operator`` call (None for any other tool)."""
    if name != HANDOFF_TOOL:
        return None
    try:
        reason = json.loads(arguments).get("reason") if arguments else None
    except (ValueError, AttributeError):
        reason = None
    return clean_text(str(reason))[:500] if reason else "the assistant handed the conversation over"
