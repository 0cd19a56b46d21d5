"""Text messages: the customer's question → the chat service → the reply (streamed as a draft in
private chats, then sent as formatted messages)."""

from __future__ import annotations

import asyncio
import logging
import time
from contextlib import AsyncExitStack

from aiogram import Bot, Router
from aiogram.types import Message, Update
from aiogram.utils.chat_action import ChatActionSender

from bot.settings import BotSettings
from bot.telegram.drafts import DraftStreamer
from bot.telegram.handoff import HandoffDesk
from bot.telegram.middlewares.access import GROUP_TYPES, strip_mention
from bot.telegram.render import send_reply
from bot.telegram.texts import Texts
from services.engine.chat import ChatService
from services.engine.turns import TurnResult
from services.errors import LeaseLostError
from services.fence import Fence
from services.metrics import RATE_LIMITED
from services.ports.queue import item_id_of
from services.ports.ratelimit import RateLimiter

log = logging.getLogger(__name__)


async def on_text(
    message: Message,
    bot: Bot,
    chat: ChatService,
    settings: BotSettings,
    limiter: RateLimiter,
    say: Texts,
    event_update: Update,
    desk: HandoffDesk,
    fence: Fence | None = None,
) -> None:
    assert message.text is not None  # guaranteed by the F.text filter
    started = time.perf_counter()
    chat_id = message.chat.id
    turn_id = item_id_of(event_update.update_id)
    decision = await limiter.hit(chat_id, key=turn_id)
    if not decision.allowed:
        RATE_LIMITED.inc()
        if decision.notify and (fence is None or fence.remaining() > 0):
            seconds = max(1, round(decision.retry_after))
            await message.answer(say("rate_limited", seconds=seconds))
        return
    customer_text = message.text
    if message.chat.type in GROUP_TYPES:
        customer_text = strip_mention(customer_text, (await bot.me()).username)
    drafts = None
    if message.chat.type == "private" and settings.drafts_enabled:
        drafts = DraftStreamer(
            bot=bot, chat_id=chat_id, draft_id=message.message_id, interval=settings.draft_interval_seconds
        )
    async with AsyncExitStack() as typing:
        await typing.enter_async_context(ChatActionSender.typing(bot=bot, chat_id=chat_id))

        async def deliver(result: TurnResult) -> None:
            if drafts is not None:
                await drafts.finish()  # the last draft before the answer
            await typing.aclose()  # stop "typing…" before the answer appears
            if result.quarantined:
                await bot.send_message(chat_id, say("session_lost"))
            if result.handoff_reason is not None and desk.enabled:  # the model handed the chat over
                await desk.start(
                    bot,
                    chat_id,
                    user=message.from_user,
                    reason=result.handoff_reason,
                    trigger="model",
                    say=say,
                    item_id=turn_id,
                    fence=fence,
                )
                return
            await send_reply(bot, chat_id, result.reply, before_each=fence.ensure_valid if fence else None)

        try:
            result = await chat.handle(
                chat_id,
                customer_text,
                deliver=deliver,
                on_delta=drafts.on_delta if drafts else None,
                on_restart=drafts.restart if drafts else None,
                turn_id=turn_id,
                fence=fence,
            )
        except (asyncio.CancelledError, LeaseLostError):
            if drafts is not None:
                await drafts.abandon()  # the turn is over for this worker: nothing more goes out
            raise
        finally:
            if drafts is not None:  # a failed turn's error text comes after the draft in flight
                await drafts.settle(within=settings.draft_settle_seconds)
    log.info(
        "turn chat=%s update=%s stored=%s sent_history=%s removed=%s est_tokens=%s prompt_tokens=%s "
        "cached_tokens=%s completion_tokens=%s llm_s=%.3f total_s=%.3f summary_updated=%s drafts=%s duplicate=%s",
        chat_id,
        event_update.update_id,
        result.stored_messages,
        result.context_history_messages,
        result.removed_history_messages,
        result.estimated_tokens,
        result.usage.prompt_tokens if result.usage else None,
        result.usage.cached_tokens if result.usage else None,
        result.usage.completion_tokens if result.usage else None,
        result.llm_seconds,
        time.perf_counter() - started,
        result.summary_updated,
        drafts.sent if drafts else 0,
        result.duplicate,
    )


async def has_text(message: Message) -> bool:
    """``F.text`` as a coroutine: aiogram runs plain callables (magic filters too) in a worker thread,
    a thread hop per update (``benchmarks/load.py --profile`` shows it)."""
    return bool(message.text)


def make_router() -> Router:
    router = Router(name="chat")
    router.message.register(on_text, has_text)
    return router
