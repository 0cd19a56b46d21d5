"""Learned FAQ entries written by operators in their group: a reply to a message of the gaps digest,
``/faq add QUESTION | ANSWER``, ``/faq list``, ``/faq remove ID``, ``/faq edit ID QUESTION | ANSWER``,
and in a handoff topic ``/faq`` (or ``/faq`` as a reply to one of the operator's answers): that answer
with the customer's messages just before it, from the handoff's transcript."""

from __future__ import annotations

import logging
from typing import Any

from aiogram import Bot, Router
from aiogram.filters import Command, CommandObject
from aiogram.types import Message, Update

from bot.telegram.desk import HandoffDesk
from bot.telegram.desk.base import split_text
from bot.telegram.handlers.handoff import in_operator_group
from services.core.fence import Fence
from services.core.handoff_records import TranscriptEntry
from services.core.knowledge import FaqEntry
from services.knowledge.learned import QUESTION_CHARS, clean_answer, clean_questions
from services.ports.knowledge import KnowledgeSource, LearnedFaq
from services.ports.queue import item_id_of

log = logging.getLogger(__name__)

LIST_QUESTION_CHARS = 80
LIST_ANSWER_CHARS = 120


def split_pair(text: str) -> tuple[tuple[str, ...], str] | None:
    """``QUESTION | ANSWER`` → (questions, answer); None when either side is empty."""
    question, bar, answer = text.partition("|")
    questions, cleaned = clean_questions([question]), clean_answer(answer)
    return (questions, cleaned) if bar and questions and cleaned else None


def entry_id(raw: str) -> str:
    return raw.strip().removeprefix("#")


def author_of(message: Message) -> str:
    if message.from_user is not None:
        return message.from_user.full_name or str(message.from_user.id)
    chat = message.sender_chat  # an anonymous admin posts as the group
    return (chat.title if chat is not None else None) or "operators"


def cut(text: str, limit: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def listing(entries: list[FaqEntry]) -> str:
    return "\n".join(
        f"#{e.id} {cut(e.questions[0], LIST_QUESTION_CHARS)} → {cut(e.answer, LIST_ANSWER_CHARS)}" for e in entries
    )


def from_transcript(entries: tuple[TranscriptEntry, ...], answer: str | None) -> tuple[str, str] | None:
    """(question, answer): the operator's ``answer`` (the last one that reads so, or without
    ``answer`` their last message) and the customer's messages just before it (notes skipped)."""
    at = None
    for index in range(len(entries) - 1, -1, -1):
        if entries[index].who == "operator" and (answer is None or entries[index].text == answer):
            at = index
            break
    if at is None:
        return None
    asked: list[str] = []
    for entry in reversed(entries[:at]):
        if entry.who == "customer":
            asked.insert(0, entry.text)
        elif entry.who == "operator" or asked:
            break
    question = " ".join(asked)[:QUESTION_CHARS].strip()
    return (question, entries[at].text) if question else None


async def tell(bot: Bot, message: Message, body: str, fence: Fence | None) -> None:
    """An answer in the group, in the message's topic (none: the General topic)."""
    if fence is not None:
        fence.ensure_valid()
    thread = message.message_thread_id if message.is_topic_message else None
    for chunk in split_text(body):
        await bot.send_message(message.chat.id, chunk, message_thread_id=thread, parse_mode=None)


async def saved(bot: Bot, message: Message, desk: HandoffDesk, entry: FaqEntry, knowledge: Any, fence: Any) -> None:
    note = "" if knowledge is not None else "\n" + desk.ops("faq_no_knowledge")
    await tell(bot, message, desk.ops("faq_saved", id=entry.id) + note, fence)


async def digest_reply(message: Message, bot: Bot, faq: LearnedFaq) -> bool | dict[str, Any]:
    """A text replying to one of the bot's digest messages (as handler data: ``post``)."""
    reply = message.reply_to_message
    if reply is None or reply.from_user is None or reply.from_user.id != bot.id or not message.text:
        return False
    if message.text.startswith("/"):
        return False
    post = await faq.post(reply.message_id)
    return {"post": post} if post is not None else False


async def on_digest_reply(
    message: Message,
    bot: Bot,
    desk: HandoffDesk,
    faq: LearnedFaq,
    post: Any,
    event_update: Update,
    knowledge: KnowledgeSource | None = None,
    fence: Fence | None = None,
) -> None:
    answer = clean_answer(message.text or "")
    key = item_id_of(event_update.update_id)
    entry = await faq.add(clean_questions(post.questions), answer, author=author_of(message), key=key)
    log.info("learned FAQ #%s from a reply to the digest (%d questions)", entry.id, len(entry.questions))
    await saved(bot, message, desk, entry, knowledge, fence)


async def on_faq(
    message: Message,
    bot: Bot,
    desk: HandoffDesk,
    faq: LearnedFaq,
    command: CommandObject,
    event_update: Update,
    knowledge: KnowledgeSource | None = None,
    fence: Fence | None = None,
) -> None:
    """The /faq commands (an entry made is keyed by its update: a redelivery makes no second one)."""
    action, _, rest = (command.args or "").strip().partition(" ")
    action, key = action.lower(), item_id_of(event_update.update_id)
    if action in ("", "this"):
        await _from_topic(message, bot, desk, faq, (key, knowledge), fence)
    elif action == "add" and (pair := split_pair(rest)) is not None:
        entry = await faq.add(*pair, author=author_of(message), key=key)
        await saved(bot, message, desk, entry, knowledge, fence)
    elif action == "list":
        entries = await faq.entries()
        await tell(bot, message, listing(entries) if entries else desk.ops("faq_none"), fence)
    elif action == "remove" and rest.strip():
        target = entry_id(rest)
        removed = await faq.remove(target)
        await tell(bot, message, desk.ops("faq_removed" if removed else "faq_missing", id=target), fence)
    elif action == "edit" and (edit := _edit_args(rest)) is not None:
        target, (questions, answer) = edit
        edited = await faq.edit(target, questions, answer, author=author_of(message))
        body = (
            desk.ops("faq_edited", id=target, version=edited.version) if edited else desk.ops("faq_missing", id=target)
        )
        await tell(bot, message, body, fence)
    else:
        await tell(bot, message, desk.ops("faq_usage"), fence)


def _edit_args(rest: str) -> tuple[str, tuple[tuple[str, ...], str]] | None:
    key, _, pair = rest.strip().partition(" ")
    parsed = split_pair(pair)
    return (entry_id(key), parsed) if key and parsed is not None else None


async def _from_topic(
    message: Message, bot: Bot, desk: HandoffDesk, faq: LearnedFaq, asked: tuple[str, Any], fence: Fence | None
) -> None:
    """``/faq`` in a handoff topic: the operator's answer (the message it replies to, if it is one of
    the operator's own, else their last one) with the customer's question before it (one that asks
    about something: two content words or more)."""
    found = await desk.customer_of(bot, message)
    if found is None:
        await tell(bot, message, desk.ops("faq_usage"), fence)
        return
    record = await desk.store.get(found[0], transcript=True)
    reply = message.reply_to_message
    own = (
        reply is not None
        and reply.forum_topic_created is None
        and reply.from_user is not None
        and message.from_user is not None
        and reply.from_user.id == message.from_user.id
    )
    from services.knowledge.gaps import worth_recording  # the stemmers: only when asked

    pair = from_transcript(record.transcript, reply.text if own and reply is not None else None)
    if pair is None or not worth_recording(pair[0]):  # "hello" → "good morning!" is no FAQ
        await tell(bot, message, desk.ops("faq_no_answer"), fence)
        return
    key, knowledge = asked
    entry = await faq.add(clean_questions([pair[0]]), clean_answer(pair[1]), author=author_of(message), key=key)
    log.info("learned FAQ #%s from the handoff of chat %s", entry.id, found[0])
    await saved(bot, message, desk, entry, knowledge, fence)


def make_router() -> Router:
    """Before the handoff router's catch-all of the operator group."""
    router = Router(name="faq")
    router.message.register(on_faq, in_operator_group, Command("faq", ignore_case=True))
    router.message.register(on_digest_reply, in_operator_group, digest_reply)
    return router
