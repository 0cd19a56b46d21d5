"""Text messages: the customer's question → the chat service → the reply (streamed as a draft in
private chats, then sent as formatted messages)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass

from aiogram import Bot, Router
from aiogram.types import Message, Update, User

from bot.settings import BotSettings
from bot.telegram.action_render import customer_of, render_actions
from bot.telegram.desk import HandoffDesk
from bot.telegram.drafts import DraftStreamer
from bot.telegram.link_hosts import LinkPolicy
from bot.telegram.middlewares.ratelimit import RateLimitMiddleware
from bot.telegram.optional import typing as show_typing
from bot.telegram.render import send_reply
from bot.telegram.texts import Texts
from services.core.actions import Customer
from services.core.errors import LeaseLostError
from services.core.fence import Fence
from services.core.records import OnDelta, OnRestart
from services.core.turns import PendingTurn, TurnResult
from services.engine.chat import ChatService
from services.media.source import MediaSource
from services.ports.backend import Backend
from services.ports.queue import item_id_of

log = logging.getLogger(__name__)


async def on_text(
    message: Message,
    bot: Bot,
    chat: ChatService,
    settings: BotSettings,
    say: Texts,
    event_update: Update,
    desk: HandoffDesk,
    customer_text: str,
    backend: Backend,
    fence: Fence | None = None,
    links: LinkPolicy | None = None,
) -> None:
    """``customer_text``: the message's text as AccessMiddleware read it (without the bot's mention)."""
    customer = await customer_of(message, backend)
    await serve_turn(
        message,
        bot,
        chat,
        settings,
        say,
        event_update,
        desk,
        customer_text,
        fence=fence,
        links=links,
        customer=customer,
    )


async def serve_turn(
    message: Message,
    bot: Bot,
    chat: ChatService,
    settings: BotSettings,
    say: Texts,
    event_update: Update,
    desk: HandoffDesk,
    customer_text: str,
    *,
    fence: Fence | None = None,
    media: MediaSource | None = None,
    links: LinkPolicy | None = None,
    customer: Customer | None = None,
) -> TurnResult:
    """One turn in Telegram: "typing…" (and drafts in private chats) while ``media`` is read (the
    downloads, a transcription: only for a turn not answered before) and the reply is produced, then
    the reply rendered (only the hosts ``links`` allows stay links under their text). ``customer``:
    who the actions act for (private chats only; None: no tools)."""
    started = time.perf_counter()
    chat_id = message.chat.id
    turn_id = item_id_of(event_update.update_id)

    async def produce(on_delta: OnDelta | None, on_restart: OnRestart | None) -> PendingTurn:
        return await chat.begin(
            chat_id,
            customer_text,
            on_delta=on_delta,
            on_restart=on_restart,
            turn_id=turn_id,
            fence=fence,
            media_source=media,
            customer=customer,
        )

    feedback = desk.feedback
    if feedback is not None:
        await feedback.customer_message(
            chat_id,
            private=message.chat.type == "private",
            language=say.language,
            sent_ms=int(message.date.timestamp() * 1000),  # a new conversation starts when it was sent
            item_id=turn_id,  # a redelivered update is not counted again
        )
    where = TurnPlace(chat_id, message.from_user, message.message_id, private=message.chat.type == "private")
    result, drafts_sent = await deliver_turn(bot, chat, settings, say, desk, where, turn_id, produce, fence, links)
    assert result is not None  # begin always makes a turn
    _log_turn(chat_id, event_update.update_id, result, time.perf_counter() - started, drafts_sent)
    return result


@dataclass(frozen=True, slots=True)
class TurnPlace:
    """Where a turn is shown: the customer's chat, the customer (None: not known here, e.g. an
    operator's approval), the id drafts are sent under, and whether drafts may be (private chats)."""

    chat_id: int
    user: User | None
    draft_id: int
    private: bool


Produce = Callable[[OnDelta | None, OnRestart | None], Awaitable[PendingTurn | None]]


async def deliver_turn(
    bot: Bot,
    chat: ChatService,
    settings: BotSettings,
    say: Texts,
    desk: HandoffDesk,
    where: TurnPlace,
    turn_id: str,
    produce: Produce,
    fence: Fence | None,
    links: LinkPolicy | None,
) -> tuple[TurnResult | None, int]:
    """A turn ``produce`` makes (``ChatService.begin``, or ``carry_out`` after a decision; None:
    nothing to do), shown in Telegram with "typing…" and drafts, then finished. Returns the finished
    result and the drafts sent."""
    drafts = _drafts(bot, where, settings)
    async with AsyncExitStack() as typing:
        await typing.enter_async_context(show_typing(bot, where.chat_id))
        try:
            turn = await produce(drafts.on_delta if drafts else None, drafts.restart if drafts else None)
            if turn is None:
                return None, 0
            if turn.deliver:
                if drafts is not None:
                    await drafts.finish()  # the last draft before the answer
                await typing.aclose()  # stop "typing…" before the answer appears
                await render_turn(
                    bot, where.chat_id, where.user, turn.result, say=say, desk=desk, item_id=turn_id, fence=fence,
                    links=links, private=where.private,
                )  # fmt: skip
            # the reply's mark first (issue 36): a Redis stall in a write before it cancelled the handler
            # after the send and before the mark, so nothing recorded the reply and the next holder sent it again
            try:
                result = await chat.finish(turn, fence=fence)  # (may compact: a model call, after the answer)
            finally:  # even when finish fails (a compaction error): the answer did go out
                if turn.deliver:
                    await _answered(desk, where.chat_id, turn.result)
        except (asyncio.CancelledError, LeaseLostError):
            if drafts is not None:
                await drafts.abandon()  # the turn is over for this worker: nothing more goes out
            raise
        finally:
            if drafts is not None:  # a failed turn's error text comes after the draft in flight
                await drafts.settle(within=settings.draft_settle_seconds)
    return result, drafts.sent if drafts else 0


async def _answered(desk: HandoffDesk, chat_id: int, result: TurnResult) -> None:
    """The answer was sent (not a handoff started instead): the first answer's time, and the quiet
    period before the question starts (recorded after ``finish``, whose reply mark must not wait on it,
    even when it fails)."""
    if desk.feedback is not None and not (result.handoff_reason is not None and desk.enabled):
        await desk.feedback.answered(chat_id)


def _drafts(bot: Bot, where: TurnPlace, settings: BotSettings) -> DraftStreamer | None:
    """The reply streamed as drafts: in private chats, where drafts are turned on."""
    if not where.private or not settings.drafts_enabled:
        return None
    return DraftStreamer(
        bot=bot, chat_id=where.chat_id, draft_id=where.draft_id, interval=settings.draft_interval_seconds
    )


def _log_turn(chat_id: int, update_id: int, result: TurnResult, seconds: float, drafts_sent: int) -> None:
    log.info(
        "turn chat=%s update=%s stored=%s sent_history=%s removed=%s est_tokens=%s prompt_tokens=%s "
        "cached_tokens=%s completion_tokens=%s llm_s=%.3f total_s=%.3f summary_updated=%s drafts=%s duplicate=%s "
        "passages=%s",
        chat_id,
        update_id,
        result.stored_messages,
        result.context_history_messages,
        result.removed_history_messages,
        result.estimated_tokens,
        result.usage.prompt_tokens if result.usage else None,
        result.usage.cached_tokens if result.usage else None,
        result.usage.completion_tokens if result.usage else None,
        result.llm_seconds,
        seconds,
        result.summary_updated,
        drafts_sent,
        result.duplicate,
        ",".join(scored.passage.id for scored in result.knowledge) or "-",  # `chat show` resolves them
    )


async def render_turn(
    bot: Bot,
    chat_id: int,
    user: User | None,
    result: TurnResult,
    *,
    say: Texts,
    desk: HandoffDesk,
    item_id: str,
    fence: Fence | None,
    links: LinkPolicy | None = None,
    private: bool,
) -> None:
    """What the turn says, in Telegram: the session-lost notice, then the handoff started (the model
    handed the chat over) or the reply, and after it what an action waits for (the customer's button,
    an operator's approval, the shared phone number)."""
    if result.quarantined:
        await bot.send_message(chat_id, say("session_lost"))
    if result.handoff_reason is not None and desk.enabled:
        await desk.start(
            bot,
            chat_id,
            user=user,
            reason=result.handoff_reason,
            trigger="model",
            say=say,
            item_id=item_id,
            fence=fence,
            private=private,
        )
        return
    await send_reply(bot, chat_id, result.reply, before_each=fence.ensure_valid if fence else None, links=links)
    await render_actions(bot, chat_id, user, result, say=say, desk=desk, fence=fence)


async def has_text(message: Message) -> bool:
    """``F.text`` as a coroutine: aiogram runs plain callables (magic filters too) in a worker thread,
    a thread hop per update (``benchmarks/load.py --profile`` shows it)."""
    return bool(message.text)


def make_router() -> Router:
    router = Router(name="chat")
    router.message.middleware(RateLimitMiddleware())  # after has_text matched, before the turn
    router.message.register(on_text, has_text)
    return router
