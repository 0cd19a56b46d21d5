"""A stub Telegram Bot API server on loopback: records every call, serves queued updates to getUpdates.

Implements getMe, getUpdates, sendMessage, sendMessageDraft, sendChatAction, editMessageText,
editMessageReplyMarkup, answerCallbackQuery (``press_update`` builds a button press),
deleteWebhook, setWebhook, setMyCommands, and for forum topics createForumTopic, closeForumTopic,
reopenForumTopic and copyMessage (``message_thread_id`` is recorded with every call's parameters), and
getFile with the file downloads (``files``: tests.stubs.files, which also builds the media updates).
Faults can be injected per method: queued error answers (``faults``), a slow answer (``delays``), an
answer held until the test lets it go (``gates``), and a method this server lacks or answers with a
non-Bot-API body (``broken``); ``instant_get_updates`` makes getUpdates answer at once instead of long
polling.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import re
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from tests.stubs.files import MediaUpdates, StubFiles

BOT_USER = {"id": 424242, "is_bot": True, "first_name": "Support", "username": "support_test_bot"}


@dataclass
class Call:
    method: str
    params: dict[str, Any]
    at: float = field(default_factory=time.monotonic)
    wall: float = field(default_factory=time.time)
    """Wall-clock time, comparable with the workers' log timestamps (same machine)."""


_FILE_PARAMS = ("photo", "voice", "audio", "document", "video_note")


@dataclass
class StubTelegram(MediaUpdates):
    calls: list[Call] = field(default_factory=list)
    updates: list[dict[str, Any]] = field(default_factory=list)
    faults: dict[str, deque[dict[str, Any]]] = field(default_factory=dict)
    """method → queued error answers, e.g. {"error_code": 429, "description": ..., "parameters": {...}}"""
    delays: dict[str, float] = field(default_factory=dict)
    """method → seconds its answers wait (a slow Bot API); the call is recorded when it arrives"""
    gates: dict[str, asyncio.Event] = field(default_factory=dict)
    """method → an event its answers wait for (the call is recorded when it arrives): a request that
    reached Telegram and is held there until the test lets its answer go"""
    reject_entities: bool = False
    conflicts: int = 0
    """getUpdates calls refused with 409 because another one was still open (as Telegram does)."""
    _polling: int = 0
    base_url: str = ""
    _runner: web.AppRunner | None = None
    _new_update: asyncio.Event = field(default_factory=asyncio.Event)
    _stopping: asyncio.Event = field(default_factory=asyncio.Event)
    _ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    _message_ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1000))
    _topic_ids: itertools.count[int] = field(default_factory=lambda: itertools.count(500))
    topics: dict[int, dict[str, Any]] = field(default_factory=dict)
    """Forum topics created: thread id → {"chat_id", "name", "closed"}."""
    # --- a Bot API server that lacks optional methods or does not long-poll (issue 26) --------------
    broken: dict[str, str] = field(default_factory=dict)
    """method → how every call of it is answered: "missing" (404, the Bot API's error for a method the
    server does not implement) or "html_500" (500 with an HTML page: a proxy's error, not a Bot API answer)"""
    instant_get_updates: bool = False
    """getUpdates answers at once with what is pending (no long polling, as some servers and proxies do)."""
    polls: list[float] = field(default_factory=list)
    """When each getUpdates arrived (monotonic seconds)."""
    files: StubFiles = field(default_factory=StubFiles)
    """The files getFile and the download route serve (``add_file``, the media builders), the downloads."""
    _media_ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))

    async def start(self, host: str = "127.0.0.1") -> str:
        app = web.Application()
        app.router.add_post("/bot{token}/{method}", self._handle)
        app.router.add_get("/file/bot{token}/{path:.+}", self.files.download)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.base_url = f"http://{host}:{port}"
        return self.base_url

    async def stop(self) -> None:
        self._stopping.set()
        self.files.stop()
        if self._runner is not None:
            await self._runner.cleanup()

    # --- building and queueing updates -------------------------------------------------------------
    def message_update(
        self,
        chat_id: int,
        text: str | None = None,
        *,
        chat_type: str = "private",
        language: str = "en",
        extra: dict[str, Any] | None = None,
        kind: str = "message",
    ) -> dict[str, Any]:
        update_id = next(self._ids)
        chat: dict[str, Any] = {"id": chat_id, "type": chat_type}
        if chat_type == "private":
            chat["first_name"] = "Customer"
        else:
            chat["title"] = "Group"
        message: dict[str, Any] = {
            "message_id": next(self._message_ids),
            "date": int(time.time()),
            "chat": chat,
            "from": {"id": abs(chat_id) + 7, "is_bot": False, "first_name": "Customer", "language_code": language},
        }
        if text is not None:
            message["text"] = text
            entities = []
            if text.startswith("/"):
                entities.append({"type": "bot_command", "offset": 0, "length": len(text.split()[0])})
            for match in re.finditer(r"@\w+", text):  # ASCII usernames: offsets equal UTF-16 offsets
                entities.append({"type": "mention", "offset": match.start(), "length": len(match.group(0))})
            if entities:
                message["entities"] = entities
        message.update(extra or {})
        return {"update_id": update_id, kind: message}

    def push(self, update: dict[str, Any]) -> dict[str, Any]:
        self.updates.append(update)
        self._new_update.set()
        return update

    def send_text(self, chat_id: int, text: str, **kwargs: Any) -> dict[str, Any]:
        return self.push(self.message_update(chat_id, text, **kwargs))

    def press(self, chat_id: int, data: str, *, message_id: int = 1, language: str = "en") -> dict[str, Any]:
        """A customer presses an inline button with ``data`` on the bot's message ``message_id``."""
        update_id = next(self._ids)
        user = {"id": abs(chat_id) + 7, "is_bot": False, "first_name": "Customer", "language_code": language}
        message = {
            "message_id": message_id,
            "date": int(time.time()),
            "chat": {"id": chat_id, "type": "private", "first_name": "Customer"},
            "from": BOT_USER,
            "text": "?",
        }
        callback = {"id": f"cb{update_id}", "from": user, "chat_instance": "1", "data": data, "message": message}
        return self.push({"update_id": update_id, "callback_query": callback})

    def buttons_to(self, chat_id: int) -> list[list[str]]:
        """The callback data of the inline buttons of each message sent to ``chat_id`` (none: [])."""
        found = []
        for call in self.of("sendMessage", chat_id):
            markup = call.params.get("reply_markup")
            markup = json.loads(markup) if isinstance(markup, str) else markup or {}
            rows = markup.get("inline_keyboard", []) if isinstance(markup, dict) else []
            found.append([button.get("callback_data", "") for row in rows for button in row])
        return found

    def sticker_update(self, chat_id: int) -> dict[str, Any]:
        sticker = {
            "file_id": "CAAC",
            "file_unique_id": "u1",
            "type": "regular",
            "width": 512,
            "height": 512,
            "is_animated": False,
            "is_video": False,
        }
        return self.message_update(chat_id, None, extra={"sticker": sticker})

    def photo_update(self, chat_id: int, caption: str | None = None, language: str = "en") -> dict[str, Any]:
        photo = [{"file_id": "AgAD-photo", "file_unique_id": "p1", "width": 640, "height": 480}]
        extra: dict[str, Any] = {"photo": photo}
        if caption is not None:
            extra["caption"] = caption
        return self.message_update(chat_id, None, language=language, extra=extra)

    def operator_update(
        self, group_id: int, thread_id: int | None, text: str | None, *, operator_id: int = 9001, extra: Any = None
    ) -> dict[str, Any]:
        """A message an operator writes in the operator group (in forum topic ``thread_id``)."""
        update = self.message_update(group_id, text, chat_type="supergroup", extra=extra)
        message = update["message"]
        message["chat"]["is_forum"] = True
        message["from"] = {"id": operator_id, "is_bot": False, "first_name": "Olga", "language_code": "en"}
        if thread_id is not None:
            message["message_thread_id"] = thread_id
            message["is_topic_message"] = True
        return update

    def press_update(
        self, chat_id: int, message_id: int, data: str, *, user_id: int | None = None, chat_type: str = "private"
    ) -> dict[str, Any]:
        """A press of an inline button with ``data`` on message ``message_id`` the bot sent in ``chat_id``
        (by the chat's customer, or ``user_id``)."""
        update_id = next(self._ids)
        presser = user_id if user_id is not None else abs(chat_id) + 7
        chat: dict[str, Any] = {"id": chat_id, "type": chat_type}
        message = {"message_id": message_id, "date": int(time.time()), "chat": chat, "from": BOT_USER, "text": "?"}
        query = {
            "id": str(update_id),
            "from": {
                "id": presser,
                "is_bot": False,
                "first_name": "Presser",
                "username": "presser",
                "language_code": "en",
            },
            "chat_instance": "1",
            "message": message,
            "data": data,
        }
        return {"update_id": update_id, "callback_query": query}

    def in_topic(self, thread_id: int, method: str | None = None) -> list[Call]:
        """Calls posting into a forum topic (sendMessage and copyMessage by default), in order."""
        methods = (method,) if method else ("sendMessage", "copyMessage")
        return [
            c for c in self.calls if c.method in methods and str(c.params.get("message_thread_id")) == str(thread_id)
        ]

    # --- reading what the bot did ------------------------------------------------------------------
    def of(self, method: str, chat_id: int | None = None) -> list[Call]:
        return [
            c
            for c in self.calls
            if c.method == method and (chat_id is None or str(c.params.get("chat_id")) == str(chat_id))
        ]

    def texts_to(self, chat_id: int) -> list[str]:
        return [c.params["text"] for c in self.of("sendMessage", chat_id)]

    async def wait_for(self, predicate: Any, within: float = 15.0) -> None:
        deadline = time.monotonic() + within
        while not predicate():
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out; calls so far: {[c.method for c in self.calls]}")
            await asyncio.sleep(0.02)

    async def wait_messages(self, chat_id: int, count: int, within: float = 15.0) -> list[str]:
        await self.wait_for(lambda: len(self.of("sendMessage", chat_id)) >= count, within)
        return self.texts_to(chat_id)

    # --- the server ----------------------------------------------------------------------------------
    async def _params(self, request: web.Request) -> dict[str, Any]:
        if request.content_type == "application/json":
            data: dict[str, Any] = await request.json()
            return data
        form = await request.post()
        params: dict[str, Any] = {}
        for key, value in form.items():
            if not isinstance(value, str):  # an uploaded file (e.g. setWebhook's certificate)
                params[key] = {"filename": value.filename, "content": value.file.read().decode(errors="replace")}
                continue
            text = value
            try:
                params[key] = json.loads(text) if text[:1] in "[{" else text
            except json.JSONDecodeError:
                params[key] = text
        return params

    async def _handle(self, request: web.Request) -> web.Response:
        method = request.match_info["method"]
        params = await self._params(request)
        if method == "getUpdates":
            self.polls.append(time.monotonic())
            if self.instant_get_updates:
                params["timeout"] = 0
            return await self._handle_get_updates(params)
        self.calls.append(Call(method, params))
        if method in self.broken:
            return self._broken_answer(self.broken[method])
        if method in self.delays:  # cut short when the stub stops
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), self.delays[method])
        if method in self.gates:
            gate = asyncio.ensure_future(self.gates[method].wait())
            stopping = asyncio.ensure_future(self._stopping.wait())
            await asyncio.wait({gate, stopping}, return_when="FIRST_COMPLETED")
            gate.cancel()
            stopping.cancel()
        fault_queue = self.faults.get(method)
        if fault_queue:
            fault = fault_queue.popleft()
            return web.json_response({"ok": False, **fault}, status=fault["error_code"])
        if method == "sendMessage" and self.reject_entities and params.get("entities"):
            return web.json_response(
                {"ok": False, "error_code": 400, "description": "Bad Request: can't parse entities"}, status=400
            )
        handler = getattr(self, f"_m_{method}", None)
        if handler is None:
            return web.json_response({"ok": False, "error_code": 404, "description": "Not Found"}, status=404)
        result = await handler(params)
        if isinstance(result, web.Response):  # the method's own error answer
            return web.Response(status=400, body=result.body, content_type="application/json")
        return web.json_response({"ok": True, "result": result})

    @staticmethod
    def _broken_answer(how: str) -> web.Response:
        if how == "missing":
            body = {"ok": False, "error_code": 404, "description": "Not Found: method not found"}
            return web.json_response(body, status=404)
        if how == "html_500":
            page = (
                "<html><head><title>500 Internal Server Error</title></head><body>Internal Server Error</body></html>"
            )
            return web.Response(status=500, text=page, content_type="text/html")
        raise ValueError(f"unknown broken answer {how!r}")

    async def _m_getMe(self, _params: dict[str, Any]) -> Any:
        return BOT_USER

    async def _m_getFile(self, params: dict[str, Any]) -> Any:
        return self.files.get_file(params)

    async def _handle_get_updates(self, params: dict[str, Any]) -> web.Response:
        if self._polling:
            self.conflicts += 1
            return web.json_response(
                {"ok": False, "error_code": 409, "description": "Conflict: terminated by other getUpdates request"},
                status=409,
            )
        self._polling += 1
        try:
            return web.json_response({"ok": True, "result": await self._m_getUpdates(params)})
        finally:
            self._polling -= 1

    async def _m_getUpdates(self, params: dict[str, Any]) -> Any:
        offset = int(params.get("offset") or 0)
        timeout = min(float(params.get("timeout") or 0), 1.0)
        deadline = time.monotonic() + timeout
        while True:
            pending = [u for u in self.updates if u["update_id"] >= offset]
            if pending or time.monotonic() >= deadline or self._stopping.is_set():
                return pending[: int(params.get("limit") or 100)]
            self._new_update.clear()
            # a stopping stub answers its open long poll at once (the server's shutdown waits for it)
            waits = [asyncio.ensure_future(event.wait()) for event in (self._new_update, self._stopping)]
            try:
                await asyncio.wait(waits, timeout=max(0.0, deadline - time.monotonic()), return_when="FIRST_COMPLETED")
            finally:
                for waiting in waits:
                    waiting.cancel()

    async def _m_sendMessage(self, params: dict[str, Any]) -> Any:
        chat_id = int(params["chat_id"])
        return {
            "message_id": next(self._message_ids),
            "date": int(time.time()),
            "chat": {"id": chat_id, "type": "private" if chat_id > 0 else "group"},
            "from": BOT_USER,
            "text": params.get("text", ""),
        }

    async def _send_file(self, params: dict[str, Any]) -> Any:
        """sendPhoto, sendVoice...: a file re-sent by its file_id (one this stub served), as a message."""
        file_id = next((str(params[k]) for k in _FILE_PARAMS if k in params), "")
        if file_id not in self.files.files:
            return web.json_response(
                {"ok": False, "error_code": 400, "description": "Bad Request: wrong file identifier/HTTP URL specified"}
            )
        return await self._m_sendMessage(params)

    _m_sendPhoto = _m_sendVoice = _m_sendAudio = _m_sendDocument = _m_sendVideoNote = _send_file

    async def _m_editMessageText(self, params: dict[str, Any]) -> Any:
        return await self._m_sendMessage(params)

    async def _m_createForumTopic(self, params: dict[str, Any]) -> Any:
        thread_id = next(self._topic_ids)
        self.topics[thread_id] = {"chat_id": int(params["chat_id"]), "name": params["name"], "closed": False}
        return {"message_thread_id": thread_id, "name": params["name"], "icon_color": 7322096}

    async def _topic_state(self, params: dict[str, Any], closed: bool) -> Any:
        topic = self.topics.get(int(params["message_thread_id"]))
        if topic is None:
            return web.json_response({"ok": False, "error_code": 400, "description": "Bad Request: TOPIC_ID_INVALID"})
        if topic["closed"] == closed:
            return web.json_response({"ok": False, "error_code": 400, "description": "Bad Request: TOPIC_NOT_MODIFIED"})
        topic["closed"] = closed
        return True

    async def _m_closeForumTopic(self, params: dict[str, Any]) -> Any:
        return await self._topic_state(params, True)

    async def _m_reopenForumTopic(self, params: dict[str, Any]) -> Any:
        return await self._topic_state(params, False)

    async def _m_copyMessage(self, _params: dict[str, Any]) -> Any:
        return {"message_id": next(self._message_ids)}

    async def _true(self, _params: dict[str, Any]) -> Any:
        return True

    _m_sendMessageDraft = _m_sendChatAction = _m_deleteWebhook = _m_setWebhook = _m_setMyCommands = _true
    _m_answerCallbackQuery = _m_editMessageReplyMarkup = _true
