"""``python -m bot set-webhook [--certificate PATH]``: registers WEBHOOK_URL and WEBHOOK_SECRET with
Telegram, once per deployment (not per worker). Telegram posts webhooks only over HTTPS to ports 443,
80, 88 or 8443, so any other URL is refused here with the reason instead of being accepted and never
called. ``--certificate`` uploads the public key of a self-signed certificate (PEM), which Telegram
then trusts for this bot."""

from __future__ import annotations

import logging
from pathlib import Path
from urllib.parse import urlsplit

from bot.settings import Settings
from services.core.errors import ConfigurationError

log = logging.getLogger(__name__)

TELEGRAM_WEBHOOK_PORTS = (443, 80, 88, 8443)
PEM_CERTIFICATE = "-----BEGIN CERTIFICATE-----"


def check_webhook_url(url: str) -> str:
    """``url`` if Telegram will call it; otherwise ConfigurationError saying what to change."""
    try:
        parts = urlsplit(url)
        port = parts.port or 443
    except ValueError as exc:
        raise ConfigurationError(f"WEBHOOK_URL {url!r} is not a URL: {exc}") from None
    if parts.scheme != "https" or not parts.hostname:
        raise ConfigurationError(
            f"WEBHOOK_URL must be an https:// URL (Telegram posts webhooks only over HTTPS), got {url!r}; "
            "put TLS in front of the workers (docker compose --profile https, see README)"
        )
    if port not in TELEGRAM_WEBHOOK_PORTS:
        allowed = ", ".join(map(str, TELEGRAM_WEBHOOK_PORTS))
        raise ConfigurationError(
            f"WEBHOOK_URL uses port {port}, but Telegram posts webhooks only to ports {allowed}: got {url!r}"
        )
    return url


def read_certificate(path: Path) -> Path:
    """``path`` if it holds a PEM certificate (the public part: never the private key)."""
    try:
        text = path.read_text(errors="replace")
    except OSError as exc:
        raise ConfigurationError(f"--certificate {path}: {exc.strerror or exc}") from None
    if "PRIVATE KEY" in text:
        raise ConfigurationError(f"--certificate {path} holds a private key: give the certificate (public) file")
    if PEM_CERTIFICATE not in text:
        raise ConfigurationError(f"--certificate {path} is not a PEM certificate ({PEM_CERTIFICATE} …)")
    return path


ALLOWED_UPDATES = ["message", "callback_query"]
"""Messages, and the presses of the actions' buttons (confirm, cancel, approve, reject)."""


async def set_webhook(settings: Settings, certificate: Path | None = None) -> None:
    url = check_webhook_url(settings.bot.webhook_url or "")
    checked = read_certificate(certificate) if certificate else None
    # aiogram takes seconds to import: a refused URL or certificate is answered before that
    from aiogram.types import FSInputFile

    from bot.factory import build_bot, set_commands

    cert = FSInputFile(checked) if checked else None
    secret = settings.bot.webhook_secret.get_secret_value() if settings.bot.webhook_secret else None
    bot = build_bot(settings.bot)
    try:
        await bot.set_webhook(url, certificate=cert, secret_token=secret, allowed_updates=ALLOWED_UPDATES)
        await set_commands(bot, settings.bot)
    finally:
        await bot.session.close()
    log.info("webhook registered at %s%s", url, f" with the certificate {certificate}" if certificate else "")
