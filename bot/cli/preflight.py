"""Start-up checks: a half-configured deployment stops with one clear message naming what to fix,
instead of starting and answering the first customer with an error.

``missing_settings`` lists the settings a command cannot do without; ``check_api_key`` asks the LLM
endpoint once (GET /models) whether it accepts OPENAI_API_KEY."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

from services.errors import ConfigurationError
from services.settings import LLMSettings

if TYPE_CHECKING:
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


async def check_api_key(settings: LLMSettings, *, request_seconds: float = 10.0) -> None:
    """One request to the endpoint's /models with the key. A 401 raises ConfigurationError; anything else
    (no such route on a local server, the endpoint unreachable right now) is only logged: the bot's own
    retries and error replies handle an endpoint that is down."""
    from openai import APIError, AsyncOpenAI, AuthenticationError  # seconds to import: only when checking

    key = settings.openai_api_key.get_secret_value().strip()
    if not key:
        raise ConfigurationError("OPENAI_API_KEY is not set")
    endpoint = settings.openai_base_url or "https://api.openai.com/v1"
    client = AsyncOpenAI(api_key=key, base_url=settings.openai_base_url, timeout=request_seconds, max_retries=0)
    try:
        await client.models.list()
    except AuthenticationError as exc:
        raise ConfigurationError(
            f"OPENAI_API_KEY was rejected by {endpoint} (401 {type(exc).__name__}): check the key and OPENAI_BASE_URL"
        ) from None
    except APIError as exc:
        log.warning("could not check OPENAI_API_KEY against %s (%s); starting anyway", endpoint, type(exc).__name__)
    else:
        log.info("OPENAI_API_KEY accepted by %s", endpoint)
    finally:
        await client.close()
