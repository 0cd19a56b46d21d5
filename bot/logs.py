"""Logging set-up shared by every entry point."""

from __future__ import annotations

import logging


def setup_logging(level: str) -> None:
    logging.basicConfig(level=level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # these log request URLs, which contain the bot token, at DEBUG/INFO
    for noisy in ("aiohttp.access", "httpx", "httpx2", "openai._base_client"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
