"""ActionHttp over TLS to the checked address: SNI and the certificate are checked against the host
name of the URL (not the address connected to). The certificate in tests/data/actions_tls is a
self-signed one for ``shop.test`` only, made for these tests (100 years, its key is no secret)."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from services.actions.http import ActionHttp
from services.actions.request import HostRule, HttpResult, PreparedRequest
from tests.unit.services.actions.http_servers import Served, serve

TLS = Path(__file__).parents[3] / "data" / "actions_tls"


@pytest.fixture
async def tls_server() -> AsyncIterator[tuple[Served, list[str | None]]]:
    names: list[str | None] = []
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(TLS / "cert.pem", TLS / "key.pem")
    context.sni_callback = lambda sock, name, ctx: names.append(name)
    async with serve(tls=context) as served:
        yield served, names


async def call(url: str, host: str, port: int, trust: ssl.SSLContext | None) -> HttpResult:
    async def loopback(name: str, port: int) -> list[str]:
        return ["127.0.0.1"]

    http = ActionHttp(
        [HostRule(host, port, private=True)], total_timeout=10.0, max_bytes=10_000, resolve=loopback, ssl_context=trust
    )
    try:
        return await asyncio.wait_for(http.send(PreparedRequest("GET", url)), 30.0)
    finally:
        await http.close()


def trusting() -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(TLS / "cert.pem"))


async def test_the_host_name_is_the_sni_and_the_certificate_checked(
    tls_server: tuple[Served, list[str | None]],
) -> None:
    served, names = tls_server
    result = await call(f"https://Shop.Test:{served.port}/orders/1", "shop.test", served.port, trusting())
    assert (result.kind, result.body) == ("ok", b'{"status": "shipped"}')
    assert names == ["shop.test"] and served.requests == ["/orders/1"]


async def test_a_certificate_for_another_name_is_unreachable(tls_server: tuple[Served, list[str | None]]) -> None:
    served, names = tls_server
    result = await call(f"https://other.test:{served.port}/", "other.test", served.port, trusting())
    assert result.kind == "unreachable" and "TLS" in result.reason
    assert names == ["other.test"] and served.requests == []


async def test_an_untrusted_certificate_is_unreachable(tls_server: tuple[Served, list[str | None]]) -> None:
    served, _ = tls_server
    result = await call(f"https://shop.test:{served.port}/", "shop.test", served.port, None)
    assert result.kind == "unreachable" and "TLS" in result.reason and served.requests == []


def test_a_context_that_skips_verification_is_rejected() -> None:
    lax = ssl.create_default_context()
    lax.check_hostname = False
    with pytest.raises(ValueError, match="host name"):
        ActionHttp([], total_timeout=1.0, max_bytes=1, ssl_context=lax)
