"""Start-up checks: a half-configured deployment stops with one clear message naming what to fix,
instead of starting and answering the first customer with an error.

``missing_settings`` lists the settings a command cannot do without; ``check_actions_file`` refuses
an ACTIONS_FILE with mistakes (one line each); ``check_api_key`` asks the LLM endpoint once (GET
/models) whether it accepts OPENAI_API_KEY."""

from __future__ import annotations

import asyncio
import logging
import sys
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit, urlunsplit

from services.core.errors import ConfigurationError
from services.settings import LLMSettings

if TYPE_CHECKING:
    from openai import AsyncOpenAI

    from bot.settings import Settings

log = logging.getLogger(__name__)

REQUIRED: dict[str, tuple[str, ...]] = {
    "run": ("BOT_TOKEN", "OPENAI_API_KEY"),
    "console": ("OPENAI_API_KEY",),
    "set-webhook": ("BOT_TOKEN", "WEBHOOK_URL", "WEBHOOK_SECRET"),
}

HINTS = {
    "BOT_TOKEN": "the token @BotFather gave you",
    "OPENAI_API_KEY": "your provider's API key (for a local server that needs none, any non-empty value)",
    "WEBHOOK_URL": "the public https:// URL Telegram posts to, on port 443, 80, 88 or 8443",
    "WEBHOOK_SECRET": "1-256 characters of A-Z a-z 0-9 _ -, e.g. from `openssl rand -hex 32`",
}


def _values(settings: Settings) -> dict[str, str]:
    secret = settings.bot.webhook_secret
    return {
        "BOT_TOKEN": settings.bot.bot_token.get_secret_value(),
        "OPENAI_API_KEY": settings.llm.openai_api_key.get_secret_value().strip(),
        "WEBHOOK_URL": settings.bot.webhook_url or "",
        "WEBHOOK_SECRET": secret.get_secret_value() if secret else "",
    }


def missing_settings(command: str, settings: Settings) -> list[str]:
    """The settings ``command`` needs that are unset or empty, in the order an operator fills them in."""
    values = _values(settings)
    return [name for name in REQUIRED.get(command, ()) if not values[name]]


def missing_message(command: str, missing: list[str], cwd: Path | None = None) -> str:
    """What is missing, where to put it and what can be tried without a Telegram token."""
    env_file = (cwd or Path.cwd()) / ".env"
    lines = [f"cannot start `{command}`: {len(missing)} setting(s) missing"]
    lines += [f"  {name} is not set: {HINTS[name]}" for name in missing]
    lines.append(f"Put them in {env_file} (or the environment), then start again.")
    if command == "run" and "BOT_TOKEN" in missing:
        lines.append(
            "No Telegram token yet? `./scripts/run console` (python -m bot console) chats with the same engine "
            "in this terminal; it needs only OPENAI_API_KEY (and OPENAI_BASE_URL for a non-OpenAI server)."
        )
    return "\n".join(lines)


def actions_file_problems(settings: Settings) -> list[str]:
    """Every mistake of ACTIONS_FILE, one line each naming the tool and the field (none unset)."""
    path = settings.actions.actions_file
    if not path:
        return []
    from services.actions.loading import ActionsFileError, load_catalog  # YAML, RE2, JSON Schema

    try:
        load_catalog(
            path,
            operator_chat_configured=settings.bot.handoff_enabled,
            timeout=settings.actions.actions_timeout_seconds,
            max_bytes=settings.actions.actions_max_response_bytes,
        )
    except ActionsFileError as exc:
        return [f"ACTIONS_FILE {path}: {line}" for line in exc.lines]
    return []


def check_actions_file(settings: Settings) -> None:
    """An ACTIONS_FILE with mistakes stops the start: each on stderr, exit code 2 (as a setting's)."""
    problems = actions_file_problems(settings)
    if not problems:
        return
    for line in problems:
        print(f"cannot start: {line}", file=sys.stderr)
    print("cannot start: fix ACTIONS_FILE (`python -m bot actions check` lists its mistakes)", file=sys.stderr)
    raise SystemExit(2)


async def check_api_key(
    settings: LLMSettings, *, request_seconds: float = 10.0, attempts: int = 3, first_delay: float = 1.0
) -> None:
    """One request to the endpoint's /models with the key. A 401 raises ConfigurationError, and so does an
    endpoint no connection reaches (refused, no such host) after ``attempts`` tries with backoff: at start
    that is a wrong OPENAI_BASE_URL far more often than an outage. Anything else (no such route on a local
    server, a slow answer) is only logged: the bot's own retries and error replies handle a slow endpoint."""
    from openai import APIConnectionError, APITimeoutError, AsyncOpenAI  # seconds to import: only when checking

    key = settings.openai_api_key.get_secret_value().strip()
    if not key:
        raise ConfigurationError("OPENAI_API_KEY is not set")
    endpoint = shown_url(settings.openai_base_url or "https://api.openai.com/v1")
    client = AsyncOpenAI(api_key=key, base_url=settings.openai_base_url, timeout=request_seconds, max_retries=0)
    delay = first_delay
    try:
        for attempt in range(1, attempts + 1):
            try:
                return await _ask(client, endpoint)
            except APITimeoutError:
                log.warning("could not check OPENAI_API_KEY: %s did not answer in time; starting anyway", endpoint)
                return
            except APIConnectionError as exc:
                if attempt == attempts:
                    raise ConfigurationError(
                        f"cannot reach OPENAI_BASE_URL {endpoint}: {connect_failure(exc)} ({attempts} tries): check "
                        "the address and port and that the server runs (unset OPENAI_BASE_URL for api.openai.com)"
                    ) from None
                log.warning("cannot reach %s (%s); trying again in %.0fs", endpoint, connect_failure(exc), delay)
                await asyncio.sleep(delay)
                delay *= 2
    finally:
        await client.close()


async def _ask(client: AsyncOpenAI, endpoint: str) -> None:
    """GET /models once: a refused key raises ConfigurationError, a connection failure is the caller's,
    any other error is logged."""
    from openai import APIConnectionError, APIError, AuthenticationError

    try:
        await client.models.list()
    except AuthenticationError as exc:
        raise ConfigurationError(
            f"OPENAI_API_KEY was rejected by {endpoint} (401 {type(exc).__name__}): check the key and OPENAI_BASE_URL"
        ) from None
    except APIConnectionError:
        raise
    except APIError as exc:
        log.warning("could not check OPENAI_API_KEY against %s (%s); starting anyway", endpoint, type(exc).__name__)
    else:
        log.info("OPENAI_API_KEY accepted by %s", endpoint)


def connect_failure(exc: BaseException) -> str:
    from services.llm.errors import connect_failure as why  # imports openai: only when it failed

    return why(exc) or "no connection"


def shown_url(url: str) -> str:
    """``url`` without the user and password it may carry."""
    try:
        parts = urlsplit(url)
        if parts.password is None and parts.username is None:
            return url
        host = parts.hostname or ""
        netloc = f"{host}:{parts.port}" if parts.port else host
    except ValueError:
        return "(a URL that cannot be read)"
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))
