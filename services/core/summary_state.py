"""The structured running summary: schema, merge and compact rendering. Pure code."""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

SummaryFormat = Literal["json_schema", "json_object", "plain"]
"""How a summary call asks for its JSON: strict structured output, only json_object, or instructions."""

LIST_FIELDS = ("key_facts", "actions_taken", "decisions", "pending_questions")
_TITLES = {
    "topic": "Topic",
    "key_facts": "Key facts",
    "actions_taken": "Actions taken",
    "decisions": "Decisions",
    "pending_questions": "Pending questions",
    "next_step": "Next step",
}


class SummaryState(BaseModel):
    """What the summarizer must return, field for field."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    topic: str = ""
    key_facts: list[str] = Field(default_factory=list)
    actions_taken: list[str] = Field(default_factory=list)
    decisions: list[str] = Field(default_factory=list)
    pending_questions: list[str] = Field(default_factory=list)
    next_step: str = ""

    @classmethod
    def json_schema_for_llm(cls) -> dict[str, Any]:
        """A strict JSON schema (all fields required, no extras) for structured output."""
        string_list = {"type": "array", "items": {"type": "string"}}
        return {
            "type": "object",
            "properties": {
                "topic": {"type": "string"},
                "key_facts": string_list,
                "actions_taken": string_list,
                "decisions": string_list,
                "pending_questions": string_list,
                "next_step": {"type": "string"},
            },
            "required": ["topic", *LIST_FIELDS, "next_step"],
            "additionalProperties": False,
        }

    def to_json(self) -> str:
        return json.dumps(self.model_dump(), ensure_ascii=False, separators=(",", ":"))

    def is_empty(self) -> bool:
        return not (self.topic or self.next_step or any(getattr(self, name) for name in LIST_FIELDS))


def _norm(item: str) -> str:
    return " ".join(item.casefold().split())


def _union(old: list[str], new: list[str]) -> list[str]:
    seen: set[str] = set()
    out: list[str] = []
    for item in [*old, *new]:
        key = _norm(item)
        if key and key not in seen:
            seen.add(key)
            out.append(item.strip())
    return out


def merge_summaries(previous: SummaryState | None, new: SummaryState) -> SummaryState:
    """Facts, actions and decisions accumulate without duplicates; pending questions, topic and next
    step take the newer view (an empty newer topic/next step keeps the old one)."""
    if previous is None:
        return SummaryState(
            topic=new.topic.strip(),
            key_facts=_union([], new.key_facts),
            actions_taken=_union([], new.actions_taken),
            decisions=_union([], new.decisions),
            pending_questions=_union([], new.pending_questions),
            next_step=new.next_step.strip(),
        )
    return SummaryState(
        topic=new.topic.strip() or previous.topic,
        key_facts=_union(previous.key_facts, new.key_facts),
        actions_taken=_union(previous.actions_taken, new.actions_taken),
        decisions=_union(previous.decisions, new.decisions),
        pending_questions=_union([], new.pending_questions),
        next_step=new.next_step.strip() or previous.next_step,
    )


def render_summary(summary: SummaryState) -> str:
    """Compact text for the prompt: one line per non-empty field, list items joined by '; '."""
    lines: list[str] = []
    for name, title in _TITLES.items():
        value = getattr(summary, name)
        if isinstance(value, list):
            if value:
                lines.append(f"{title}: " + "; ".join(value))
        elif value:
            lines.append(f"{title}: {value}")
    return "\n".join(lines)
