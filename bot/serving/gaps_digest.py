"""The daily digest of unanswered questions: at GAPS_DIGEST_HOUR (UTC) or at the first look after it,
one worker a day (an atomic claim per date, shared by every worker) posts the most asked groups of
near-duplicate questions to the operators' group, one message per group, each remembered by its
message id so that an operator's reply to it becomes a learned FAQ entry. Groups the knowledge answers
by now (a learned entry, a new document) are left out. A failure before anything is posted gives the
claim back; a worker that dies after posting began leaves that day with what it posted."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from aiogram import Bot

from bot.metrics import ERRORS
from services.core.errors import SupportBotError
from services.core.knowledge import DigestPost, KnowledgeQuery
from services.ports.knowledge import KnowledgeGaps, KnowledgeSource, LearnedFaq

if TYPE_CHECKING:
    from bot.settings import Settings
    from bot.telegram.desk import HandoffDesk
    from services.ports.backend import Backend

log = logging.getLogger(__name__)

LOOK_SECONDS = 60.0
"""How often each worker looks whether the day's digest is due."""
EXAMPLES_SHOWN = 3


def digest_day(now: float, hour: int) -> str | None:
    """The UTC date whose digest is due at ``now`` (epoch seconds), None before ``hour``."""
    moment = datetime.datetime.fromtimestamp(now, datetime.UTC)
    return moment.date().isoformat() if moment.hour >= hour else None


class DigestApp(Protocol):
    """What the digest takes from the application (``bot.factory.App``)."""

    @property
    def bot(self) -> Bot: ...
    @property
    def backend(self) -> Backend: ...
    @property
    def settings(self) -> Settings: ...
    @property
    def desk(self) -> HandoffDesk: ...
    @property
    def knowledge(self) -> KnowledgeSource | None: ...


class GapsDigest:
    def __init__(
        self,
        *,
        bot: Bot,
        gaps: KnowledgeGaps,
        faq: LearnedFaq,
        group: int,
        hour: int,
        groups: int,
        ops: Callable[..., str],
        knowledge: KnowledgeSource | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._bot, self._gaps, self._faq, self._group = bot, gaps, faq, group
        self._hour, self._groups, self._ops, self._knowledge, self._clock = hour, groups, ops, knowledge, clock
        self._done: str | None = None
        """The day this worker saw claimed (by itself or another): not asked again."""

    @classmethod
    def of(cls, app: DigestApp) -> GapsDigest:
        """With OPERATOR_CHAT_ID and GAPS_DIGEST_HOUR set (``App.background_tasks`` checks)."""
        settings = app.settings.bot
        assert app.desk.group is not None and settings.gaps_digest_hour is not None
        return cls(
            bot=app.bot,
            gaps=app.backend.gaps,
            faq=app.backend.faq,
            group=app.desk.group,
            hour=settings.gaps_digest_hour,
            groups=settings.gaps_digest_groups,
            ops=app.desk.ops,
            knowledge=app.knowledge,
        )

    async def run(self, every: float = LOOK_SECONDS) -> None:
        """Look every ``every`` seconds until cancelled; a failure is logged and looked at again."""
        while True:
            try:
                await self.look()
            except SupportBotError as exc:
                log.warning("gaps digest: %s", exc)
            except Exception as exc:  # Telegram refusing a message: the day's digest is cut short, logged
                ERRORS.labels(type(exc).__name__).inc()
                log.warning("gaps digest: not (all) posted: %s", exc, exc_info=exc)
            await asyncio.sleep(every)

    async def look(self) -> int:
        """Post the day's digest if it is due and no worker did: the number of groups posted."""
        day = digest_day(self._clock(), self._hour)
        if day is None or day == self._done:
            return 0
        if not await self._faq.claim_digest(day):
            log.info("gaps digest %s: posted already (by another worker, or before a restart)", day)
            self._done = day
            return 0
        self._done = day
        try:  # nothing posted yet: a failure gives the day back to the next look (of any worker)
            posts = await self._top()
            if posts:
                await self._bot.send_message(self._group, self._ops("faq_digest_head", day=day, count=len(posts)))
        except BaseException:
            self._done = None
            with contextlib.suppress(SupportBotError):  # the claim stays: that day goes without
                await asyncio.shield(self._faq.release_digest(day))
            raise
        if not posts:
            log.info("gaps digest %s: no unanswered question to post", day)
            return 0
        for post in posts:
            lines = [self._ops("faq_digest_group", count=post.count, question=post.questions[0])]
            lines += [f"· {example}" for example in post.questions[1:EXAMPLES_SHOWN]]
            sent = await self._bot.send_message(self._group, "\n".join(lines), parse_mode=None)
            await self._faq.remember_post(sent.message_id, post)
        log.info("gaps digest %s: %d groups posted to the operators' group", day, len(posts))
        return len(posts)

    async def _top(self) -> list[DigestPost]:
        from services.knowledge.gap_groups import GROUPED_QUESTIONS, group_questions  # the stemmers: when due

        grouping = group_questions(await self._gaps.top(GROUPED_QUESTIONS))
        posts: list[DigestPost] = []
        for group in grouping.groups:
            if len(posts) >= self._groups:
                break
            if not await self._answered(group.examples[0]):
                posts.append(DigestPost(tuple(group.examples), group.count))
        return posts

    async def _answered(self, question: str) -> bool:
        if self._knowledge is None:
            return False
        found = await self._knowledge.current().search(KnowledgeQuery(question), limit=1, full_text=True)
        return found.matched
