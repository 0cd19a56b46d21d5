"""Builders shared by the tests."""

from __future__ import annotations

from prompts import default_registry
from services.core.tokens import TokenCounter
from services.engine.chat import ChatService
from services.engine.grounding import Grounding
from services.llm.client import LLMClient
from services.media.notes import ImageNotes
from services.memory.policy import CompactionPolicy, WaterMarkPolicy
from services.memory.summarizer import Summarizer
from services.ports.media import MediaMemos
from services.ports.observer import TurnObserver
from services.ports.sessions import SessionStore


def make_service(
    *,
    store: SessionStore,
    llm: LLMClient,
    counter: TokenCounter,
    budget: int = 1200,
    summary_max_tokens: int = 300,
    policy: CompactionPolicy | None = None,
    observer: TurnObserver | None = None,
    grounding: Grounding | None = None,
    notes: ImageNotes | None = None,
    note_wait: float = 3.0,
) -> ChatService:
    registry = default_registry()
    summarizer = Summarizer(llm=llm, counter=counter, prompt=registry.get("summary"), max_tokens=summary_max_tokens)
    return ChatService(
        store=store,
        llm=llm,
        summarizer=summarizer,
        counter=counter,
        instruction=registry.get("support_chat").render(company="ACME", handoff="", knowledge=""),
        instruction_role="system",
        budget=budget,
        summary_max_tokens=summary_max_tokens,
        policy=policy or WaterMarkPolicy(),
        observer=observer,
        grounding=grounding,
        notes=notes,
        note_wait=note_wait,
    )


def make_notes(llm: LLMClient, counter: TokenCounter, memos: MediaMemos | None = None) -> ImageNotes:
    instruction = default_registry().get("image_note").render(max_words=30)
    return ImageNotes(llm=llm, counter=counter, instruction=instruction, role="system", memos=memos)


def customer_line(n: int) -> str:
    """A realistic customer message of ~40 tokens."""
    return (
        f"Message {n}: I still have a question about the delivery, the courier did not call me and the "
        f"tracking page shows the same status as yesterday, what should I do now? (note {n})"
    )
