"""Durable intake: updates reach Redis before Telegram is told they arrived.

Webhook: a request is answered 200 only once its update is queued (503 if Redis is down, so Telegram
retries); with ``WEBHOOK_SERVE_RECEIVED`` a worker with a free slot also takes the chat's lease in the
same script and serves it itself. Polling: one worker at a time holds the poller lease, queues what
getUpdates returns, then moves the offset on (kept in Redis). An update that cannot be queued for a
reason other than Redis being down goes to the dead letters: intake never stops, and never makes
Telegram retry an update forever."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import secrets
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from aiogram import Bot
from aiogram.exceptions import ClientDecodeError, TelegramAPIError, TelegramConflictError
from aiohttp import web

from bot.metrics import DEAD_LETTERS, REDELIVERIES
from bot.telegram.action_buttons import read_press
from bot.telegram.albums import record_album_photo
from services.core.errors import TransientError
from services.ports.deadletters import DeadLetters
from services.ports.handoffs import HandoffStore
from services.ports.knowledge import LearnedFaq
from services.ports.media import Albums
from services.ports.queue import Claim, PollingLease, Step, WorkQueue, item_id_of

log = logging.getLogger(__name__)

SECRET_HEADER = "X-Telegram-Bot-Api-Secret-Token"
_CHAT_CARRIERS = ("message", "edited_message", "channel_post", "edited_channel_post", "business_message")


def chat_of(update: dict[str, Any]) -> int | None:
    """The chat an update belongs to (a button press: the chat of the message its button is on)."""
    callback = update.get("callback_query")
    if isinstance(callback, dict) and isinstance(callback.get("message"), dict):
        update = callback
    for key in _CHAT_CARRIERS:
        carrier = update.get(key)
        if isinstance(carrier, dict) and isinstance(carrier.get("chat"), dict):
            chat_id = carrier["chat"].get("id")
            return int(chat_id) if isinstance(chat_id, int) else None
    return None


Route = Callable[[int, dict[str, Any]], Awaitable[int | None]]
"""(chat id of the update, update) → the chat whose inbox takes it (None: dropped)."""


def operator_route(operator_chat_id: int | None, handoffs: HandoffStore, faq: LearnedFaq | None = None) -> Route:
    """Updates from the operator group go into the inbox of the customer chat whose forum topic they
    were written in (so both directions of a handoff are served in order under that chat's lease),
    and an operator's press on an approval card into the inbox of the chat it names (the action runs
    there, in that chat's order, under its lease; the handler checks the ledger, so a forged press
    decides nothing); outside a topic, a ``/faq`` command and a reply to a message of the gaps digest
    go into the group's own inbox (served under its lease); the group's other messages and presses,
    and topics no handoff opened, are dropped here and never reach the model. Every other update
    stays with its own chat."""

    async def route(chat_id: int, update: dict[str, Any]) -> int | None:
        if operator_chat_id is None or chat_id != operator_chat_id:
            return chat_id
        query = update.get("callback_query")
        if isinstance(query, dict):  # an operator's Approve / Reject: the customer's chat carries it out
            press = read_press(query.get("data") if isinstance(query.get("data"), str) else None)
            return press.chat_id if press is not None and press.by_operator else None
        message = update.get("message")
        if not isinstance(message, dict):
            return None
        topical = message.get("is_topic_message") is True  # not a reply thread
        thread = message.get("message_thread_id") if topical else None
        if not isinstance(thread, int):
            return operator_chat_id if await _for_the_group(message, faq) else None
        customer = await handoffs.chat_of_topic(operator_chat_id, thread)
        if customer is None:
            log.info(
                "operator group: update %s in topic %s, which no handoff opened; dropped",
                update.get("update_id"),
                thread,
            )
        return customer

    return route


async def _for_the_group(message: dict[str, Any], faq: LearnedFaq | None) -> bool:
    """A message outside the topics the group's own handlers take: ``/faq`` or a reply to the digest."""
    text = message.get("text")
    if faq is None or not isinstance(text, str):
        return False
    command = text.split(maxsplit=1)[0].partition("@")[0].lower() if text.strip() else ""
    if command == "/faq":
        return True
    reply = message.get("reply_to_message")
    sender = reply.get("from") if isinstance(reply, dict) else None
    if not isinstance(sender, dict) or sender.get("is_bot") is not True or not isinstance(reply, dict):
        return False
    message_id = reply.get("message_id")
    return isinstance(message_id, int) and await faq.post(message_id) is not None


UNEXPECTED_FAILURES_KEPT = 3
"""An update whose queueing fails this many times in a row, for no known reason, is dead-lettered."""


class IntakeError(TransientError):
    """Queueing failed for an unexpected reason: the update is offered again (a few times)."""


class LocalServer(Protocol):
    """The worker of this process, as the intake sees it (``bot.queueing.worker.Worker``)."""

    def has_room(self) -> bool: ...

    def new_token(self) -> str: ...

    async def adopt(self, claim: Claim, step: Step, *, sent: float) -> bool: ...


class Intake:
    """Queues raw updates under their chat; what cannot be queued goes to the dead letters. With
    ``serve``, the chat of an update is served by that worker when it has room and nobody holds it."""

    def __init__(
        self,
        *,
        queue: WorkQueue,
        dead_letters: DeadLetters,
        identity: str,
        route: Route | None = None,
        serve: LocalServer | None = None,
        albums: Albums | None = None,
    ) -> None:
        self._albums = albums
        self._route = route
        self._serve = serve
        self._queue = queue
        self._dead = dead_letters
        self._identity = identity
        self._failures: dict[int, int] = {}

    async def take(self, update: dict[str, Any]) -> None:
        """Queue one update. Raises TransientError when it must be offered again later."""
        update_id = update.get("update_id")
        chat_id = await self._destination(update)
        if chat_id is None or not isinstance(update_id, int):
            return  # no chat (or an operator's message with no customer): nothing this bot answers
        if self._albums is not None:  # before the queue: the album's first photo waits for the rest
            await record_album_photo(self._albums, update)  # StoreUnavailableError: offered again
        try:
            # ASCII JSON: a lone surrogate ("\ud800", valid JSON) cannot be encoded as UTF-8 for Redis
            payload = json.dumps(update, ensure_ascii=True, separators=(",", ":"))
        except (TypeError, ValueError) as exc:
            await self._dead_letter(chat_id, update_id, update, f"cannot encode it: {exc}")
            return
        try:
            if not await self._enqueue(chat_id, update_id, payload):
                REDELIVERIES.inc()
        except TransientError:
            raise
        except Exception as exc:
            # not the update's fault as far as anyone can tell: offered again (503 / the same offset),
            # and only an update that keeps failing on its own goes to the dead letters
            await self._failed(chat_id, update_id, update, exc)

    async def _destination(self, update: dict[str, Any]) -> int | None:
        """The chat whose queue ``update`` goes to (an operator's reply: its customer's), or None."""
        chat_id = chat_of(update)
        if chat_id is None or not isinstance(update.get("update_id"), int) or self._route is None:
            return chat_id
        return await self._route(chat_id, update)  # TransientError: offered again

    async def _enqueue(self, chat_id: int, update_id: int, payload: str) -> bool:
        """Whether the update is new: served here at once when ``serve`` has room, else queued."""
        if self._serve is not None and self._serve.has_room():
            return await self._take_and_serve(self._serve, chat_id, item_id_of(update_id), payload, update_id)
        return await self._queue.enqueue(chat_id, item_id_of(update_id), payload, order=update_id)

    async def _failed(self, chat_id: int, update_id: int, update: dict[str, Any], exc: Exception) -> None:
        """IntakeError (offered again) until the update failed UNEXPECTED_FAILURES_KEPT times, then a dead letter."""
        failures = self._failures.pop(update_id, 0) + 1
        if failures < UNEXPECTED_FAILURES_KEPT:
            self._failures[update_id] = failures
            while len(self._failures) > 1000:
                self._failures.pop(next(iter(self._failures)))
            log.exception("update %s could not be queued (%d); it will be offered again", update_id, failures)
            raise IntakeError(f"update {update_id} not queued: {type(exc).__name__}") from exc
        log.exception("update %s could not be queued %d times", update_id, failures)
        await self._dead_letter(chat_id, update_id, update, f"cannot queue it: {type(exc).__name__}: {exc}")

    async def _take_and_serve(self, serve: LocalServer, chat_id: int, item_id: str, payload: str, order: int) -> bool:
        sent = time.monotonic()
        taken = await self._queue.enqueue_and_take(chat_id, item_id, payload, order=order, token=serve.new_token())
        claim, step = taken.claim, taken.step
        if claim is not None and step is not None and not await serve.adopt(claim, step, sent=sent):
            # no room after all: any worker takes it; the attempt counted for its head was not made
            if step.item is not None:
                await self._queue.note(claim, step.item, "set_aside")
            await self._queue.hand_back(claim)
        return taken.new

    async def _dead_letter(self, chat_id: int, update_id: int, update: dict[str, Any], error: str) -> None:
        log.error("update %s moved to the dead letters: %s", update_id, error)
        await self._dead.add(
            chat_id=chat_id,
            item_id=item_id_of(update_id),
            order=update_id,
            payload=json.dumps(update, ensure_ascii=True, default=str),
            error=f"intake: {error}",
            attempts=1,
            worker=self._identity,
        )
        DEAD_LETTERS.labels("intake").inc()


def webhook_handler(intake: Intake, secret: str) -> Callable[[web.Request], Awaitable[web.Response]]:
    async def handle(request: web.Request) -> web.Response:
        if not secrets.compare_digest(request.headers.get(SECRET_HEADER, ""), secret):
            return web.Response(status=401, text="Unauthorized")
        try:
            update = json.loads(await request.read())
        except ValueError:  # UnicodeDecodeError included
            return web.Response(status=400, text="Bad Request")
        if not isinstance(update, dict):
            return web.Response(status=400, text="Bad Request")
        try:
            await intake.take(update)
        except TransientError as exc:
            log.warning("update not queued, Telegram will retry: %s", exc)
            return web.Response(status=503, text="Service Unavailable")
        return web.Response(status=200)

    return handle


class Poller:
    """getUpdates by exactly one worker at a time (a leader lease in Redis)."""

    def __init__(
        self,
        *,
        lease: PollingLease,
        bot: Bot,
        intake: Intake,
        poll_timeout: int,
        allowed_updates: list[str],
    ) -> None:
        self._lease = lease
        self._bot = bot
        self._intake = intake
        self._poll_timeout = poll_timeout
        self._allowed = allowed_updates
        self._stopping = asyncio.Event()
        self.leading = False
        self.conflicts = 0

    def stop(self) -> None:
        self._stopping.set()

    async def _pause(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stopping.wait(), seconds)

    async def run(self) -> None:
        try:
            while not self._stopping.is_set():
                try:
                    leading = await self._lease.lead()
                except TransientError as exc:
                    log.warning("poller: Redis unreachable (%s)", exc)
                    leading = False
                if leading != self.leading:
                    log.info("poller: %s leadership", "took" if leading else "lost")
                    self.leading = leading
                    if leading:
                        with contextlib.suppress(TelegramAPIError):
                            await self._bot.delete_webhook(drop_pending_updates=False)
                if not leading:
                    await self._pause(self._lease.lease_ms / 3000)
                    continue
                await self._poll_once()
        finally:
            if self.leading:
                with contextlib.suppress(TransientError):
                    await self._lease.resign()
                self.leading = False

    async def _poll_once(self) -> None:
        try:
            offset = await self._lease.offset()
            try:
                parsed = await self._bot.get_updates(
                    offset=offset,
                    timeout=self._poll_timeout,
                    allowed_updates=self._allowed,
                    request_timeout=self._poll_timeout + 10,
                )
                updates = [u.model_dump(mode="json", by_alias=True, exclude_none=True) for u in parsed]
            except ClientDecodeError as exc:
                # an update this aiogram cannot parse: queue the raw ones (the worker dead-letters what
                # it cannot read) rather than asking for the same batch forever
                raw = _raw_updates(exc.data)
                if raw is None:
                    raise
                updates = raw
                log.warning("poller: %d update(s) aiogram cannot parse; queued raw", len(updates))
        except TelegramConflictError:
            # another getUpdates is still open (e.g. a dead leader's long poll): wait it out
            self.conflicts += 1
            await self._pause(1.0)
            return
        except (TelegramAPIError, ClientDecodeError, TransientError, OSError) as exc:
            log.warning("poller: getUpdates failed (%s); retrying", type(exc).__name__)
            await self._pause(1.0)
            return
        if not updates:
            return
        try:
            for update in updates:
                await self._intake.take(update)
            next_offset = max(int(u["update_id"]) for u in updates) + 1
            await self._lease.set_offset(next_offset)
        except TransientError as exc:
            # not acknowledged: Telegram sends them again on the next getUpdates
            log.warning("poller: could not queue updates (%s)", exc)
            await self._pause(1.0)


def _raw_updates(data: Any) -> list[dict[str, Any]] | None:
    """The raw updates of a getUpdates answer aiogram could not parse (None if there are none)."""
    if isinstance(data, str | bytes):  # the codec itself failed: the standard parser is the lenient one
        try:
            data = json.loads(data)
        except ValueError:
            return None
    result = data.get("result") if isinstance(data, dict) else None
    if not isinstance(result, list):
        return None
    updates = [u for u in result if isinstance(u, dict) and isinstance(u.get("update_id"), int)]
    return updates or None
