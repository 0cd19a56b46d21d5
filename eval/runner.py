"""Runs the dialogues through the real ChatService and checks every control fact."""

from __future__ import annotations

from dataclasses import dataclass

from eval.dialogues import Dialogue
from services.core.turns import TurnResult
from services.engine.chat import ChatService
from services.memory.identifiers import mentions, summary_text
from services.ports.sessions import SessionStore


@dataclass(frozen=True, slots=True)
class FactOutcome:
    dialogue: str
    label: str
    value: str
    in_summary: bool
    in_final_prompt_verbatim: bool
    answered: bool


@dataclass(frozen=True, slots=True)
class DialogueOutcome:
    name: str
    compactions: int
    facts: list[FactOutcome]


def _normalized(text: str) -> str:
    return " ".join(text.casefold().split())


async def run_dialogue(chat: ChatService, store: SessionStore, dialogue: Dialogue, *, chat_id: int) -> DialogueOutcome:
    """Play the dialogue, then ask the final question; a fact counts as answered if the reply contains it."""
    await chat.reset(chat_id)
    compactions = 0

    async def deliver(_result: TurnResult) -> None:
        return None

    for message in dialogue.messages:
        result = await chat.handle(chat_id, message, deliver=deliver)
        compactions += int(result.summary_updated)
    session = await store.load(chat_id)
    summary = summary_text(session.summary) if session.summary else ""
    verbatim = "\n".join(m.content for m in session.messages)
    final = await chat.handle(chat_id, dialogue.final_question, deliver=deliver)
    reply = _normalized(final.reply)
    facts = [
        FactOutcome(
            dialogue=dialogue.name,
            label=fact.label,
            value=fact.value,
            in_summary=mentions(summary, fact.value),
            in_final_prompt_verbatim=fact.value in verbatim,
            answered=_normalized(fact.value) in reply,
        )
        for fact in dialogue.facts
    ]
    return DialogueOutcome(dialogue.name, compactions, facts)


def table(outcomes: list[DialogueOutcome]) -> str:
    lines = [f"{'dialogue':<26} {'control fact':<18} {'value':<44} {'in summary':>10} {'answered':>8}"]
    for outcome in outcomes:
        for fact in outcome.facts:
            lines.append(
                f"{fact.dialogue:<26} {fact.label:<18} {fact.value:<44} "
                f"{'yes' if fact.in_summary else 'no':>10} {'yes' if fact.answered else 'no':>8}"
            )
    facts = [f for o in outcomes for f in o.facts]
    kept = sum(f.in_summary for f in facts)
    answered = sum(f.answered for f in facts)
    lines.append(f"compactions per dialogue: {', '.join(f'{o.name}={o.compactions}' for o in outcomes)}")
    lines.append(
        f"in summary: {kept}/{len(facts)} ({kept / len(facts):.0%}); "
        f"answered: {answered}/{len(facts)} ({answered / len(facts):.0%})"
    )
    return "\n".join(lines)
