"""ActionHttp against real aiohttp servers on loopback: declared hosts only, DNS once per request with
every answer checked, the connection made to the checked address, redirects never followed, and
nothing sent (no connection at all) for a refused request."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator

import pytest
from aiohttp import web

from services.actions.http import ActionHttp
from services.actions.network import Resolve
from services.actions.request import HostRule, HttpResult, PreparedRequest
from tests.unit.services.actions.http_servers import Served, serve

DEADLINE = 30.0
"""A hang guard only: no assertion is made on how long anything takes."""


class Answers:
    """An injected resolver: the answers given call by call (the last one repeated), and the count."""

    def __init__(self, *answers: list[str]) -> None:
        self.answers = list(answers)
        self.calls: list[tuple[str, int]] = []

    async def __call__(self, host: str, port: int) -> list[str]:
        self.calls.append((host, port))
        return self.answers[min(len(self.calls), len(self.answers)) - 1]


async def send(http: ActionHttp, url: str, method: str = "GET", **headers: str) -> HttpResult:
    return await asyncio.wait_for(http.send(PreparedRequest(method, url, headers=headers)), DEADLINE)


@pytest.fixture
async def server() -> AsyncIterator[Served]:
    async with serve() as served:
        yield served


def client(*hosts: HostRule, resolve: Resolve | None = None, **limits: float) -> ActionHttp:
    return ActionHttp(
        hosts,
        total_timeout=limits.get("total", 10.0),
        max_bytes=int(limits.get("max_bytes", 100_000)),
        resolve=resolve,
    )


async def test_a_private_host_is_reached_with_the_rendered_path_verbatim(server: Served) -> None:
    http = client(HostRule("127.0.0.1", server.port, private=True))
    try:
        result = await send(http, f"http://127.0.0.1:{server.port}/orders/a%2Fb?q=%26x", Authorization="Bearer s3")
    finally:
        await http.close()
    assert (result.kind, result.status, result.content_type) == ("ok", 200, "application/json")
    assert result.body == b'{"status": "shipped"}'
    assert server.requests == ["/orders/a%2Fb?q=%26x"]
    assert server.headers[0]["Authorization"] == "Bearer s3"
    assert server.headers[0]["Accept-Encoding"] == "identity"


async def test_the_same_server_is_refused_without_private(server: Served) -> None:
    http = client(HostRule("127.0.0.1", server.port))
    try:
        plain = await send(http, f"http://127.0.0.1:{server.port}/")
        tls = await send(http, f"https://127.0.0.1:{server.port}/")
    finally:
        await http.close()
    assert (plain.kind, tls.kind) == ("refused", "refused")
    assert "plain http" in plain.reason and "127.0.0.1 is loopback" in tls.reason
    assert server.connections == 0


async def test_localhost_resolves_to_loopback_and_is_refused(server: Served) -> None:
    http = client(HostRule("localhost", server.port))
    try:
        result = await send(http, f"https://LocalHost:{server.port}/")
    finally:
        await http.close()
    assert result.kind == "refused"
    assert "localhost resolves to" in result.reason and "loopback" in result.reason
    assert "private: true" in result.reason
    assert server.connections == 0


async def test_an_undeclared_host_or_port_makes_no_connection(server: Served) -> None:
    answers = Answers(["127.0.0.1"])
    http = client(
        HostRule("shop.test", private=True), HostRule("127.0.0.1", server.port + 1, private=True), resolve=answers
    )
    try:
        results = [
            await send(http, f"http://127.0.0.1:{server.port}/"),
            await send(http, f"http://shop.test:{server.port}/"),
            await send(http, f"http://other.test:{server.port}/"),
        ]
    finally:
        await http.close()
    assert [result.kind for result in results] == ["refused"] * 3
    assert all("is not a declared host" in result.reason for result in results)
    assert server.connections == 0 and answers.calls == []


@pytest.mark.parametrize("answer", [["93.184.215.14", "127.0.0.1"], ["127.0.0.1", "93.184.215.14"]])
async def test_one_forbidden_answer_among_good_ones_refuses(server: Served, answer: list[str]) -> None:
    answers = Answers(answer)
    http = client(HostRule("shop.test", server.port), resolve=answers)
    try:
        result = await send(http, f"https://shop.test:{server.port}/")
    finally:
        await http.close()
    assert result.kind == "refused" and "127.0.0.1 is loopback" in result.reason
    assert answers.calls == [("shop.test", server.port)] and server.connections == 0


async def test_the_connection_goes_to_the_checked_answer_not_a_second_lookup() -> None:
    """DNS rebinding: the name's first answer (checked) is 127.0.0.1, every later answer 127.0.0.2;
    a second lookup by the HTTP client would reach the server on 127.0.0.2."""
    async with serve() as checked, serve(port=checked.port, host="127.0.0.2") as rebound:
        answers = Answers(["127.0.0.1"], ["127.0.0.2"])
        http = client(HostRule("shop.test", checked.port, private=True), resolve=answers)
        try:
            first = await send(http, f"http://shop.test:{checked.port}/first")
            assert answers.calls == [("shop.test", checked.port)]
            second = await send(http, f"http://Shop.Test:{checked.port}/second")
        finally:
            await http.close()
    assert (first.kind, second.kind) == ("ok", "ok")
    # the second request's answer is checked too, then it reuses the kept-alive connection made to
    # the first checked address (the same host under the same rule); nothing ever reached 127.0.0.2
    assert checked.requests == ["/first", "/second"] and checked.connections == 1
    assert rebound.connections == 0
    assert len(answers.calls) == 2  # once per request: no cache between requests


async def test_the_connection_after_a_new_answer_goes_to_it() -> None:
    """A fresh connection (the server closes each one) goes to the answer checked for its request."""

    async def closing(request: web.Request) -> web.StreamResponse:
        return web.Response(text="ok", headers={"Connection": "close"})

    async with serve(closing) as checked, serve(closing, port=checked.port, host="127.0.0.2") as rebound:
        answers = Answers(["127.0.0.1"], ["127.0.0.2"])
        http = client(HostRule("shop.test", checked.port, private=True), resolve=answers)
        try:
            first = await send(http, f"http://shop.test:{checked.port}/first")
            second = await send(http, f"http://shop.test:{checked.port}/second")
        finally:
            await http.close()
    assert (first.kind, second.kind) == ("ok", "ok")
    assert (checked.requests, rebound.requests) == (["/first"], ["/second"])


async def test_a_redirect_is_never_followed(server: Served) -> None:
    async def redirect(request: web.Request) -> web.StreamResponse:
        target = request.query.get("to", "/elsewhere")
        return web.Response(status=302, headers={"Location": target}, text="moved")

    async with serve(redirect) as mover:
        http = client(HostRule("127.0.0.1", mover.port, private=True))
        try:
            away = await send(http, f"http://127.0.0.1:{mover.port}/a?to=http://127.0.0.1:{server.port}/steal")
            same = await send(http, f"http://127.0.0.1:{mover.port}/b")
        finally:
            await http.close()
    for result in (away, same):
        assert (result.kind, result.status) == ("http_error", 302)
        assert "redirect (302) not followed" in result.reason and "steal" not in result.reason
    assert server.connections == 0
    assert mover.requests == [f"/a?to=http://127.0.0.1:{server.port}/steal", "/b"]


@pytest.mark.parametrize(
    ("url", "rule", "why"),
    [
        ("https://[::ffff:127.0.0.1]:{port}/", HostRule("::ffff:127.0.0.1", 0), "IPv4-mapped form of 127.0.0.1"),
        ("https://0.0.0.0:{port}/", HostRule("0.0.0.0", 0), "unspecified"),
        ("http://0.0.0.0:{port}/", HostRule("0.0.0.0", 0, private=True), "unspecified"),
        ("http://169.254.169.254:{port}/", HostRule("169.254.169.254", 0, private=True), "metadata"),
        ("https://[::1]:{port}/", HostRule("::1", 0), "loopback"),
        ("http://2130706433:{port}/", HostRule("127.0.0.1", 0, private=True), "non-canonical"),
        ("http://0177.0.0.1:{port}/", HostRule("127.0.0.1", 0, private=True), "non-canonical"),
        ("http://127.1:{port}/", HostRule("127.0.0.1", 0, private=True), "non-canonical"),
        ("http://0x7f.0.0.1:{port}/", HostRule("127.0.0.1", 0, private=True), "non-canonical"),
        ("http://[::ffff:7f00:1]:{port}/", HostRule("127.0.0.1", 0, private=True), "not a declared host"),
    ],
)
async def test_address_forms_in_the_url_are_refused(server: Served, url: str, rule: HostRule, why: str) -> None:
    answers = Answers(["127.0.0.1"])
    http = client(HostRule(rule.host, server.port, private=rule.private), resolve=answers)
    try:
        result = await send(http, url.format(port=server.port))
    finally:
        await http.close()
    assert result.kind == "refused" and why in result.reason
    assert server.connections == 0 and answers.calls == []


async def test_dns_failure_and_a_closed_port_are_unreachable() -> None:
    async def no_such_name(host: str, port: int) -> list[str]:
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed_port = probe.getsockname()[1]
    http = client(HostRule("shop.test", closed_port, private=True), resolve=Answers(["127.0.0.1"]))
    gone = client(HostRule("gone.test"), resolve=no_such_name)
    try:
        refused = await send(http, f"http://shop.test:{closed_port}/")
        missing = await send(gone, "https://gone.test/")
    finally:
        await http.close()
        await gone.close()
    assert refused.kind == "unreachable" and f"shop.test:{closed_port}" in refused.reason
    assert (missing.kind, missing.reason) == ("unreachable", "the DNS lookup of gone.test failed")


async def test_no_proxy_from_the_environment_and_no_cookies_kept(
    server: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def with_cookie(request: web.Request) -> web.StreamResponse:
        response = web.Response(text="ok")
        response.set_cookie("session", "customer-a")
        return response

    async with serve(with_cookie) as api, serve() as proxy:
        for name in ("HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "ALL_PROXY"):
            monkeypatch.setenv(name, f"http://127.0.0.1:{proxy.port}")
        monkeypatch.setenv("NO_PROXY", "")
        http = client(HostRule("127.0.0.1", api.port, private=True))
        try:
            for _ in range(2):
                assert (await send(http, f"http://127.0.0.1:{api.port}/me")).kind == "ok"
        finally:
            await http.close()
    assert proxy.connections == 0 and api.requests == ["/me", "/me"]
    assert "Cookie" not in api.headers[1]
