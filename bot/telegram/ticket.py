"""The ticket posted as a handoff topic's first message (plain text in the operators' language)."""

from __future__ import annotations

from collections.abc import Sequence

from services.core.records import StoredMessage
from services.core.summary_state import SummaryState, render_summary


def ticket_text(
    *,
    title: str,
    summary: SummaryState | None,
    recent: Sequence[StoredMessage],
    reason: str,
    language: str,
    labels: dict[str, str],
    actions: Sequence[str] = (),
    waiting: Sequence[str] = (),
) -> str:
    """The ticket posted as the topic's first message (plain text; ``labels`` are the operator texts).
    ``actions`` and ``waiting``: the lines of the actions taken and the decisions still open
    (``services.engine.decisions.ticket_actions``), listed when there are any."""
    lines = [title, "", f"{labels['reason']}: {reason}", f"{labels['language']}: {language}", ""]
    lines.append(f"{labels['summary']}:")
    lines.append(render_summary(summary) if summary is not None else labels["no_summary"])
    for label, items in (
        (labels.get("actions", "Actions taken"), actions),
        (labels.get("waiting", "Waiting"), waiting),
    ):
        if items:
            lines += ["", f"{label}:", *(f"- {item}" for item in items)]
    if recent:
        lines += ["", f"{labels['recent']}:"]
        for message in recent:
            who = labels["customer"] if message.role == "user" else labels["assistant"]
            lines.append(f"{who}: {message.content}")
    return "\n".join(lines)
