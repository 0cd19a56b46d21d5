"""The pure parts of a handoff: the ticket text, its splitting, the transcript the summarizer folds."""

from __future__ import annotations

from bot.telegram.desk.base import split_text, topic_name
from bot.telegram.ticket import ticket_text
from services.core.handoff_records import TranscriptEntry
from services.core.records import StoredMessage
from services.core.summary_state import SummaryState
from services.memory.handoff_memory import transcript_messages

LABELS = {
    "reason": "Reason",
    "language": "Language",
    "summary": "Summary",
    "no_summary": "(none)",
    "recent": "Last messages",
    "customer": "Customer",
    "assistant": "Assistant",
}


def test_ticket_holds_summary_recent_turns_reason_and_language() -> None:
    summary = SummaryState(topic="damaged delivery", key_facts=["order 7718", "box intact"])
    recent = [StoredMessage(0, "user", "the stand is cracked", 5), StoredMessage(1, "assistant", "sorry!", 3)]
    text = ticket_text(title="Ticket", summary=summary, recent=recent, reason="asked", language="ru", labels=LABELS)
    for part in (
        "Ticket",
        "Reason: asked",
        "Language: ru",
        "order 7718",
        "box intact",
        "Customer: the stand is cracked",
    ):
        assert part in text
    assert "(none)" in ticket_text(title="T", summary=None, recent=[], reason="r", language="en", labels=LABELS)


def test_ticket_lists_the_actions_taken_and_the_decisions_waiting() -> None:
    text = ticket_text(
        title="T", summary=None, recent=[], reason="r", language="en",
        labels={**LABELS, "actions": "Actions taken", "waiting": "Waiting for a decision"},
        actions=["order_status 5521: shipped, eta 2026-12-06"], waiting=["Cancel order 7718? (customer to confirm)"],
    )  # fmt: skip
    assert "Actions taken:\n- order_status 5521: shipped, eta 2026-12-06" in text
    assert "Waiting for a decision:\n- Cancel order 7718? (customer to confirm)" in text
    assert "Actions taken" not in ticket_text(
        title="T", summary=None, recent=[], reason="r", language="en", labels=LABELS
    )


def test_long_tickets_split_on_lines_within_the_limit() -> None:
    lines = [f"line {n}: " + "x" * 50 for n in range(200)] + ["y" * 9000]
    chunks = split_text("\n".join(lines), limit=4096)
    assert len(chunks) > 3 and all(0 < len(c) <= 4096 for c in chunks)
    assert "".join(chunks).replace("\n", "") == "".join(lines)
    assert chunks[0].endswith("x" * 50), "split between lines, not inside one"


def test_transcript_leaves_internal_notes_out_of_the_model_memory() -> None:
    entries = [
        TranscriptEntry("customer", "photo attached"),
        TranscriptEntry("operator", "replacement approved"),
        TranscriptEntry("note", "VIP, be nice"),
    ]
    messages = transcript_messages(entries)
    assert [(m.role, m.content) for m in messages] == [
        ("user", "photo attached"),
        ("assistant", "Human operator: replacement approved"),
    ]
    assert TranscriptEntry.from_json(entries[2].to_json()) == entries[2]


def test_topic_name_is_capped() -> None:
    assert topic_name(None, 42) == "customer · 42"
    from aiogram.types import User

    user = User(id=1, is_bot=False, first_name="A" * 200, username="anna")
    assert len(topic_name(user, 42)) == 128
