"""set-webhook refuses URLs Telegram would never call, and uploads only a PEM certificate."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from bot.cli.webhook_setup import check_webhook_url, read_certificate
from services.core.errors import ConfigurationError


@pytest.mark.parametrize(
    "url",
    ["https://bot.example.com/tg", "https://bot.example.com:8443/tg", "https://203.0.113.5:88/x", "https://h:80/"],
)
def test_urls_telegram_calls(url: str) -> None:
    assert check_webhook_url(url) == url


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("http://bot.example.com/tg", "must be an https:// URL"),
        ("https://bot.example.com:8080/tg", "port 8080, but Telegram posts webhooks only to ports 443, 80, 88, 8443"),
        ("bot.example.com/tg", "must be an https:// URL"),
        ("https://bot.example.com:99999/", "is not a URL"),
        ("", "must be an https:// URL"),
    ],
)
def test_urls_refused_with_the_reason(url: str, reason: str) -> None:
    with pytest.raises(ConfigurationError, match=re.escape(reason)):
        check_webhook_url(url)


def test_certificate_must_be_a_public_pem(tmp_path: Path) -> None:
    good = tmp_path / "cert.pem"
    good.write_text("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
    assert read_certificate(good) == good
    key = tmp_path / "key.pem"
    key.write_text("-----BEGIN PRIVATE KEY-----\nMIIE\n-----END PRIVATE KEY-----\n")
    with pytest.raises(ConfigurationError, match="private key"):
        read_certificate(key)
    other = tmp_path / "notes.txt"
    other.write_text("hello")
    with pytest.raises(ConfigurationError, match="not a PEM certificate"):
        read_certificate(other)
    with pytest.raises(ConfigurationError, match="No such file"):
        read_certificate(tmp_path / "missing.pem")
