"""``python -m bot report``: the figures of a scripted set of conversations (written through the
conversation log, by its rules, on a clock the test moves) equal the ones computed by hand."""

from __future__ import annotations

import io
from datetime import UTC, datetime
from pathlib import Path

import pytest
from PIL import Image

from bot.cli.commands import parse_command_line
from bot.cli.report import report
from services.backends.memory.gaps import InMemoryKnowledgeGaps
from services.backends.memory.quality import InMemoryConversationLog
from services.core.quality import Figures, percentile

DAY = 86400.0
DEC_3 = datetime(2026, 12, 3, tzinfo=UTC).timestamp()


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


async def conversation(
    log: InMemoryConversationLog,
    clock: Clock,
    chat: int,
    at: float,
    *,
    answer_after: float | None = None,
    rating: str | None = None,
    asked: bool = False,
    handoff: bool = False,
    private: bool = True,
) -> None:
    """One conversation: a message at ``at``, the answer after ``answer_after`` s, a handoff, the
    question (when ``asked`` or rated) and the press."""
    clock.now = at
    await log.customer_message(chat, private=private, language="en", gap_seconds=DAY)
    if answer_after is not None:
        clock.now = at + answer_after
        await log.answered(chat, ask_after_seconds=60)
    if handoff:
        await log.handoff_opened(chat, private=private)
        clock.now += 120
        await log.handoff_ended(chat, ask=True)
    if asked or rating:
        clock.now += 3600
        ask = await log.begin_ask(chat)
        assert ask is not None
        assert await log.asked(chat, ask.conversation)
        if rating:
            assert await log.rate(chat, ask.conversation, rating, item_id=f"u{chat}") == "new"  # type: ignore[arg-type]


async def scripted() -> InMemoryConversationLog:
    clock = Clock()
    log = InMemoryConversationLog(clock=clock)
    await conversation(log, clock, 9, DEC_3 - DAY / 2, answer_after=1, rating="no")  # Dec 2: outside 2 days
    hour = 3600.0
    await conversation(log, clock, 1, DEC_3 + 10 * hour, answer_after=2, rating="yes")  # A: resolved
    await conversation(log, clock, 2, DEC_3 + 11 * hour, answer_after=4, handoff=True, rating="no")  # B
    await conversation(log, clock, 3, DEC_3 + 12 * hour, answer_after=1, rating="no")  # C
    await conversation(log, clock, 1, DEC_3 + DAY + 11 * hour, answer_after=10, asked=True)  # D: resolved
    await conversation(log, clock, 4, DEC_3 + DAY + 12 * hour)  # E: never answered
    clock.now = DEC_3 + DAY + 13 * hour
    await log.handoff_opened(5, private=True)  # F: /operator first
    await conversation(log, clock, -7, DEC_3 + DAY + 14 * hour, answer_after=3, private=False)  # G: resolved
    return log


async def test_the_figures_equal_the_hand_computed_ones(tmp_path: Path) -> None:
    log = await scripted()
    gaps = InMemoryKnowledgeGaps()
    for question in ("how do I return a stand?", "how do I return a stand?", "do you ship to Mars?"):
        await gaps.record(1, question)
    out = io.StringIO()
    chart = tmp_path / "quality.png"
    now = datetime(2026, 12, 4, 18, tzinfo=UTC)
    assert await report(log, gaps, days=2, plot=chart, now=now, out=out) == 0
    text = out.getvalue()
    # 7 conversations: A B C (Dec 3), D E F G (Dec 4); resolved A D G; handed off B F; asked A B C D;
    # rated yes A, no B C; first answers 1 2 3 4 10 s; customer messages 6 (F began with /operator)
    for line in (
        "conversations           7 (",
        "resolved by the bot     3 of 7 conversations (43 %)",
        "handed off              2 of 7 conversations (29 %)",
        "feedback asked          4 of 7 conversations (57 %)",
        "rated yes               1 of 3 ratings (33 %)",
        "rated no                2 of 3 ratings (67 %)",
        "feedback response rate  3 of 4 questions asked (75 %)",
        "median 3.0 s, p90 10.0 s (of 5 conversations answered)",
        "customer messages       6 in the period\n",
        "unanswered questions    the 2 most asked, kept over SESSION_TTL_SECONDS (a listing, not a share",
        "2\thow do i return a stand?",
        "2026-12-03\t3\t1\t1\t3\t1\t2\t2.0 s",
        "2026-12-04\t4\t2\t1\t1\t0\t0\t6.5 s",
    ):
        assert line in text, f"{line!r} not in:\n{text}"
    assert "3 time(s); 6 customer messages" not in text, "all-time gap counts are not a share of the period"
    with Image.open(chart) as image:
        assert image.format == "PNG" and image.width >= 480


def test_percentiles_and_an_empty_period() -> None:
    assert percentile([1.0, 2.0, 3.0, 4.0, 10.0], 90) == 10.0
    assert percentile([1.0, 2.0], 50) == 1.0
    empty = Figures.of([])
    assert (empty.median_first_answer, empty.p90_first_answer, empty.rated) == (None, None, 0)


async def test_an_empty_period_has_no_percentages() -> None:
    out = io.StringIO()
    await report(InMemoryConversationLog(), InMemoryKnowledgeGaps(), days=1, out=out)
    assert "handed off              0 of 0 conversations\n" in out.getvalue(), "no share of nothing"


@pytest.mark.parametrize("days", ["0", "x", "-3", "99999"])
def test_days_must_be_a_sensible_number(days: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        parse_command_line(["report", "--days", days])
    assert exited.value.code == 2 and "--days" in capsys.readouterr().err


def test_the_report_command_line() -> None:
    args = parse_command_line(["report", "--days", "30", "--plot", "q.png"])
    assert (args.command, args.days, args.plot) == ("report", 30, Path("q.png"))
    assert parse_command_line(["report"]).days == 7
