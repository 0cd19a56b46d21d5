"""Telegram-side settings (the engine's own live in services.settings)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from bot.telegram.link_hosts import parse_safe_hosts
from services.actions.settings import ActionsSettings
from services.settings import (
    KnowledgeSettings,
    LLMSettings,
    MediaSettings,
    MemorySettings,
    RedisSettings,
    http_url,
)

_SECRET_CHARS = re.compile(r"[A-Za-z0-9_-]{1,256}")  # fullmatch: "$" would accept a trailing newline
_TOKEN = re.compile(r"[0-9]+:\S+")
_NEW_SECRET = "set it to 1-256 characters of A-Z a-z 0-9 _ -, e.g. the output of `openssl rand -hex 32`"


def _id_set(raw: str) -> frozenset[int]:
    try:
        return frozenset(int(part) for part in raw.replace(";", ",").split(",") if part.strip())
    except ValueError as exc:
        raise ValueError(f"not a comma-separated list of numeric ids: {raw!r}") from exc


class BotSettings(BaseSettings):
    """The Telegram side: the bot, how updates arrive, drafts, flood control, access, logs, the ops server
    and handoff to human operators."""

    model_config = SettingsConfigDict(env_file=".env", env_file_encoding="utf-8", extra="ignore", env_ignore_empty=True)

    bot_token: SecretStr = Field(
        default=SecretStr(""),
        description="the token @BotFather gave you (not needed by the console); its number, before the colon, "
        "namespaces the Redis keys",
    )
    bot_mode: Literal["polling", "webhook"] = Field(
        default="polling",
        description="polling (getUpdates) or webhook (an aiohttp server Telegram posts to; needs WEBHOOK_SECRET)",
    )
    telegram_api_url: str | None = Field(
        default=None,
        description="another Bot API server, e.g. a self-hosted telegram-bot-api (http://telegram-bot-api:8081); "
        "unset: Telegram's",
    )
    webhook_host: str = Field(default="0.0.0.0", description="address the webhook server listens on")
    webhook_port: int = Field(
        default=8080, ge=1, le=65535, description="port of the webhook server (it serves /healthz and /readyz too)"
    )
    webhook_path: str = Field(
        default="/telegram/webhook", description="path Telegram posts updates to; must start with /"
    )
    webhook_secret: SecretStr | None = Field(
        default=None,
        description="required in webhook mode: Telegram sends it in X-Telegram-Bot-Api-Secret-Token, requests "
        "without it get 401; 1-256 characters of A-Z a-z 0-9 _ -",
    )
    webhook_url: str | None = Field(
        default=None,
        description="public URL Telegram posts to, registered by `python -m bot set-webhook`: https:// on port "
        "443, 80, 88 or 8443",
    )
    default_language: str = Field(
        default="en", description="bot texts when the user's Telegram language is not one the bot speaks (en, ru)"
    )
    draft_interval_seconds: float = Field(
        default=0.7, ge=0.1, description="at most one draft per this many seconds while a reply streams"
    )
    drafts_enabled: bool = Field(default=True, description="stream replies into private chats with sendMessageDraft")
    draft_settle_seconds: float = Field(
        default=2.0, ge=0, le=30, description="how long a failed turn's error text waits for the draft in flight"
    )
    flood_retries: int = Field(
        default=3,
        ge=0,
        description="a real message refused with Telegram's 429 waits its retry_after and is sent again at most "
        "this often (drafts and chat actions are never retried)",
    )
    flood_max_wait_seconds: float = Field(
        default=30.0, ge=0, description="total flood-control wait per message, seconds"
    )
    optional_call_timeout_seconds: float = Field(
        default=3.0,
        gt=0,
        description='the command menu (setMyCommands), "typing…" (sendChatAction), drafts (sendMessageDraft) and a '
        "button press's toast and buttons removed (answerCallbackQuery, editMessageReplyMarkup) are best effort: "
        "a call not answered within this many seconds is dropped, like one that fails",
    )
    polling_min_interval_seconds: float = Field(
        default=1.0,
        ge=0,
        description="an empty getUpdates answer that came sooner than this after the request waits for the rest "
        "(a Bot API server that does not long-poll is asked at most once per interval); 0 = off",
    )
    rate_limit_per_minute: int = Field(default=20, ge=0, description="per chat, shared by all workers; 0 = off")
    allowed_user_ids: str = Field(
        default="",
        description="comma-separated user ids; empty = everyone. Others get one polite refusal, nothing is stored",
    )
    allowed_chat_ids: str = Field(default="", description="comma-separated chat ids; empty = every chat")
    group_require_mention: bool = Field(
        default=True, description="in groups, answer only messages that mention the bot, reply to it or are commands"
    )
    safe_link_hosts: str = Field(
        default="",
        description="comma-separated hosts a reply may link to with the address hidden under its text (exact; "
        "*.example.com: example.com and its subdomains), besides the hosts of the documents' url:/canonical "
        "links; every other link shows its address",
    )
    log_level: str = Field(default="INFO", description="DEBUG, INFO, WARNING or ERROR")
    log_format: Literal["text", "json"] = Field(
        default="text", description="text (for a terminal) or json (one object per line, for log shippers)"
    )
    metrics_host: str = Field(default="0.0.0.0", description="address of the ops server (/metrics, /healthz, /readyz)")
    metrics_port: int = Field(default=9100, ge=0, le=65535, description="port of the ops server; 0 turns it off")
    metrics_port_tries: int = Field(
        default=10,
        ge=1,
        le=100,
        description="several workers on one host: while METRICS_PORT is taken, the next port is tried, up to this "
        "many in all (the log names the port taken: 9100, 9101, … for Prometheus); 1: exactly METRICS_PORT or stop",
    )
    token_drift_warn_ratio: float = Field(
        default=0.15,
        gt=0,
        description="warn when the provider's prompt tokens differ from the estimate by more than this fraction",
    )
    operator_chat_id: int | None = Field(
        default=None, description="supergroup with Topics where operators answer; unset: no handoff"
    )
    handoff_reply_timeout_seconds: float = Field(
        default=900.0,
        gt=0,
        description="no operator message this long after a handoff starts: the customer is told it takes longer, "
        "the topic is flagged",
    )
    handoff_resume_on_timeout: bool = Field(
        default=False, description="after the reply timeout the assistant answers again (the handoff ends)"
    )
    gaps_digest_hour: int | None = Field(
        default=None,
        ge=0,
        le=23,
        description="with OPERATOR_CHAT_ID: the hour (UTC, 0-23) at which the day's digest of the most asked "
        "unanswered questions is posted to the operators' group (once a day across workers; a worker that starts "
        "later that day posts it then), e.g. 9; unset: no digest",
    )
    gaps_digest_groups: int = Field(
        default=5, ge=1, le=20, description="groups of near-duplicate questions in the daily digest"
    )
    feedback_after_seconds: int = Field(
        default=3600,
        ge=0,
        description="a conversation quiet this long after the bot's answer (or a handoff that ended) gets one "
        "question with Yes / No buttons: did this solve the problem? 0: never asked",
    )
    conversation_gap_seconds: int = Field(
        default=86400,
        gt=0,
        description="a customer message after this long a quiet (or after /new) starts a new conversation "
        "(docs/quality.md)",
    )

    @field_validator("bot_token")
    @classmethod
    def _token_shape(cls, value: SecretStr) -> SecretStr:
        token = value.get_secret_value()
        if token and not _TOKEN.fullmatch(token):  # aiogram's own check, with a message that holds no value
            raise ValueError(
                "is not a Telegram bot token (the bot's number, a colon, then letters and digits, no spaces): "
                "copy it again from @BotFather"
            )
        return value

    @field_validator("telegram_api_url")
    @classmethod
    def _api_url(cls, value: str | None) -> str | None:
        return http_url(value, example="http://127.0.0.1:8081 for a self-hosted telegram-bot-api")

    @field_validator("webhook_secret")
    @classmethod
    def _secret_chars(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and not _SECRET_CHARS.fullmatch(value.get_secret_value()):
            raise ValueError(f"may hold only A-Z, a-z, 0-9, _ and - (1-256 characters): {_NEW_SECRET}")
        return value

    @field_validator("webhook_path")
    @classmethod
    def _path(cls, value: str) -> str:
        if not value.startswith("/"):
            raise ValueError("must start with /, e.g. /telegram/webhook")
        return value

    @field_validator("safe_link_hosts")
    @classmethod
    def _safe_hosts(cls, value: str) -> str:
        parse_safe_hosts(value)  # fail at start-up on an entry that is not a host name
        return value

    @field_validator("allowed_user_ids", "allowed_chat_ids")
    @classmethod
    def _ids(cls, value: str) -> str:
        try:
            _id_set(value)  # fail at start-up on a malformed list
        except ValueError:
            raise ValueError("is not a comma-separated list of numeric ids, e.g. 12345,67890") from None
        return value

    @model_validator(mode="after")
    def _webhook_needs_a_secret(self) -> BotSettings:
        if self.bot_mode == "webhook" and self.webhook_secret is None:
            raise ValueError(f"BOT_MODE=webhook needs WEBHOOK_SECRET: {_NEW_SECRET}")
        return self

    @property
    def allowed_users(self) -> frozenset[int]:
        return _id_set(self.allowed_user_ids)

    @property
    def allowed_chats(self) -> frozenset[int]:
        return _id_set(self.allowed_chat_ids)

    def is_allowed(self, user_id: int | None, chat_id: int) -> bool:
        users, chats = self.allowed_users, self.allowed_chats
        if users and (user_id is None or user_id not in users):
            return False
        return not chats or chat_id in chats

    @property
    def handoff_enabled(self) -> bool:
        return self.operator_chat_id is not None

    def require_token(self) -> str:
        token = self.bot_token.get_secret_value()
        if not token:
            raise ValueError("BOT_TOKEN is not set (see .env.example)")
        return token


class WorkerSettings(BaseSettings):
    """Queue workers (used when REDIS_URL is set: any number of processes share one Redis)."""

    model_config = SettingsConfigDict(env_file=".env", env_file_encoding="utf-8", extra="ignore", env_ignore_empty=True)

    worker_concurrency: int = Field(default=64, ge=1, description="chats served at once per process")
    worker_lease_seconds: float = Field(
        default=30.0, gt=0, le=30, description="a dead worker's chats are taken over within this (seconds)"
    )
    worker_idle_wait_seconds: float = Field(
        default=1.0, gt=0, description="how long an idle worker waits for a wake-up before looking for due work again"
    )
    shutdown_grace_seconds: float = Field(
        default=25.0,
        ge=0,
        description="on SIGTERM, time to finish the updates in progress before handing the rest back",
    )
    polling_timeout_seconds: int = Field(
        default=10,
        ge=1,
        le=50,
        description="getUpdates long-poll timeout (polling mode); lowered to a third of WORKER_LEASE_SECONDS "
        "when not below it",
    )
    worker_max_attempts: int = Field(default=3, ge=1, description="failed attempts before an update is dead-lettered")
    worker_give_up_seconds: float = Field(
        default=600.0, gt=0, description="how long transient failures (Telegram/Redis down) are retried"
    )
    media_download_give_up_seconds: float = Field(
        default=60.0,
        gt=0,
        description="how long a customer's file that Telegram's file server fails to serve is retried "
        "(the customer is told at the first failure, or after 5 s of waiting); then the customer is asked "
        "to send it again and the chat's later messages are answered",
    )
    llm_max_requests_per_question: int = Field(
        default=10,
        ge=1,
        description="model requests one question may make across all its attempts (a provider that keeps "
        "failing); then it is given up and its customer told",
    )
    webhook_serve_received: bool = Field(
        default=False,
        description="a webhook worker with a free slot serves the chat of an update it receives itself "
        "(when no worker holds it) instead of queueing it for any worker; off by default: in the chaos "
        "benchmark it cost more duplicate replies after a crash than its CPU saving is worth",
    )

    @model_validator(mode="after")
    def _poll_within_lease(self) -> WorkerSettings:
        if self.polling_timeout_seconds >= self.worker_lease_seconds:
            self.polling_timeout_seconds = max(1, int(self.worker_lease_seconds / 3))
        return self


class RuntimeSettings(BaseSettings):
    """The speed-ups of the ``fast`` extra (bot/serving/fastpath.py), read on their own before the
    other settings: the event loop must be chosen before any loop starts. Each can be turned off to
    measure what it brings (``benchmarks/load.py --variant``)."""

    model_config = SettingsConfigDict(env_file=".env", env_file_encoding="utf-8", extra="ignore", env_ignore_empty=True)

    event_loop: Literal["auto", "asyncio"] = Field(
        default="auto", description="auto: uvloop when installed; asyncio: the standard event loop"
    )
    json_codec: Literal["auto", "json"] = Field(
        default="auto", description="aiogram's JSON codec. auto: orjson when installed; json: the standard library"
    )
    gc_freeze: bool = Field(
        default=True,
        description="once wired, move the start-up objects out of the cyclic garbage collector's way "
        "(gc.freeze), so full collections do not stop the event loop for long",
    )

    @field_validator("event_loop", "json_codec", mode="before")
    @classmethod
    def _lower(cls, value: object) -> object:
        return value.lower() if isinstance(value, str) else value


@dataclass
class Settings:
    """Every settings group, read once from the environment / .env (light to import: the entry point
    reads it before loading aiogram)."""

    bot: BotSettings = field(default_factory=BotSettings)
    llm: LLMSettings = field(default_factory=LLMSettings)
    memory: MemorySettings = field(default_factory=MemorySettings)
    knowledge: KnowledgeSettings = field(default_factory=KnowledgeSettings)
    media: MediaSettings = field(default_factory=MediaSettings)
    redis: RedisSettings = field(default_factory=RedisSettings)
    actions: ActionsSettings = field(default_factory=ActionsSettings)
    workers: WorkerSettings = field(default_factory=WorkerSettings)
    runtime: RuntimeSettings = field(default_factory=RuntimeSettings)
