"""``python -m bot report [--days N] [--plot FILE]``: the support quality figures of the last N days,
computed from the conversation records (docs/quality.md defines each and its denominator), each with
its count; ``--plot`` draws them per day as a PNG (Pillow)."""

from __future__ import annotations

import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TextIO

from services.core.quality import Conversation, Figures, per_day
from services.ports.knowledge import KnowledgeGaps
from services.ports.quality import ConversationLog

TOP_GAPS = 5
SERIES = (
    ("conversations", (90, 110, 140)),
    ("resolved", (60, 160, 90)),
    ("handed off", (230, 150, 40)),
    ("rated yes", (70, 130, 220)),
    ("rated no", (210, 70, 70)),
)
"""The chart's bars per day, and their colours."""


def since_ms(days: int, now: datetime) -> int:
    """The start (UTC midnight) of the first of the last ``days`` days, today included."""
    first = (now.astimezone(UTC) - timedelta(days=days - 1)).replace(hour=0, minute=0, second=0, microsecond=0)
    return int(first.timestamp() * 1000)


def share(count: int, of: int, what: str) -> str:
    percent = f" ({100 * count / of:.0f} %)" if of else ""
    return f"{count} of {of} {what}{percent}"


def seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} s"


def figure_lines(figures: Figures) -> list[tuple[str, str]]:
    """Each figure with its count and its definition's denominator."""
    n = figures.conversations
    return [
        ("conversations", f"{n} (started in the period: a message after /new or a quiet gap)"),
        ("resolved by the bot", share(figures.resolved, n, "conversations") + ": answered, no handoff, not rated No"),
        ("handed off", share(figures.handed_off, n, "conversations")),
        ("feedback asked", share(figures.asked, n, "conversations")),
        ("rated yes", share(figures.rated_yes, figures.rated, "ratings")),
        ("rated no", share(figures.rated_no, figures.rated, "ratings")),
        ("feedback response rate", share(figures.rated, figures.asked, "questions asked")),
        (
            "time to first answer",
            f"median {seconds(figures.median_first_answer)}, p90 {seconds(figures.p90_first_answer)} "
            f"(of {len(figures.first_answers)} conversations answered)",
        ),
    ]


async def report(
    conversations: ConversationLog,
    gaps: KnowledgeGaps,
    *,
    days: int,
    plot: Path | None = None,
    now: datetime | None = None,
    out: TextIO = sys.stdout,
) -> int:
    now = now or datetime.now(UTC)
    start = since_ms(days, now)
    records = [c for c in await conversations.conversations(start) if c.started_ms >= start]
    figures = Figures.of(records)
    first_day = datetime.fromtimestamp(start / 1000, UTC).strftime("%Y-%m-%d")
    out.write(f"support quality, the last {days} day(s): {first_day} .. {now.astimezone(UTC):%Y-%m-%d} (UTC)\n")
    width = max(len(name) for name, _ in figure_lines(figures))
    for name, value in figure_lines(figures):
        out.write(f"  {name:<{width}}  {value}\n")
    top = await gaps.top(TOP_GAPS)
    out.write(f"  {'customer messages':<{width}}  {figures.messages} in the period\n")
    out.write(  # a listing: the gaps store counts over SESSION_TTL_SECONDS, not over the period
        f"  {'unanswered questions':<{width}}  the {len(top)} most asked, kept over SESSION_TTL_SECONDS "
        "(a listing, not a share of the period; `knowledge gaps` groups them all)\n"
    )
    for question, count in top:
        out.write(f"  {'':<{width}}    {count}\t{question}\n")
    write_days(records, out)
    if plot is not None:
        draw(per_day(records), plot)
        out.write(f"chart written to {plot}\n")
    return 0


def write_days(records: list[Conversation], out: TextIO) -> None:
    out.write("per day: day, conversations, resolved, handed off, asked, rated yes, rated no, median first answer\n")
    for day, figures in per_day(records).items():
        counts = (figures.conversations, figures.resolved, figures.handed_off, figures.asked)
        row = "\t".join(str(v) for v in (*counts, figures.rated_yes, figures.rated_no))
        out.write(f"  {day}\t{row}\t{seconds(figures.median_first_answer)}\n")


def values(figures: Figures) -> tuple[int, ...]:
    return (figures.conversations, figures.resolved, figures.handed_off, figures.rated_yes, figures.rated_no)


def draw(days: dict[str, Figures], path: Path) -> None:
    """Grouped bars per day (the ``SERIES``), a legend and the day under each group."""
    from PIL import Image, ImageDraw  # Pillow: a runtime dependency (images customers send)

    bar, gap, top, bottom, left = 12, 24, 48, 40, 40
    group = bar * len(SERIES) + gap
    width = max(560, left * 2 + group * max(1, len(days)))
    height = 320
    peak = max((max(values(f)) for f in days.values()), default=0) or 1
    image = Image.new("RGB", (width, height), "white")
    pen = ImageDraw.Draw(image)
    base = height - bottom
    pen.line([(left - 4, base), (width - 10, base)], fill="black")
    pen.text((left - 4, 6), f"conversations per day (max {peak})", fill="black")
    for x, (name, colour) in enumerate(SERIES):
        pen.rectangle([(left + x * 100, 26), (left + 8 + x * 100, 34)], fill=colour)
        pen.text((left + 12 + x * 100, 24), name, fill="black")
    for i, (day, figures) in enumerate(days.items()):
        x0 = left + i * group
        for j, value in enumerate(values(figures)):
            h = round((base - top) * value / peak)
            pen.rectangle([(x0 + j * bar, base - h), (x0 + (j + 1) * bar - 2, base)], fill=SERIES[j][1])
        pen.text((x0, base + 6), day[5:], fill="black")
    image.save(path, format="PNG")
