"""deploy/nginx.conf with Debian's nginx: a replica answering 503 never loses a webhook POST, and
replicas are re-resolved as they scale. The upstream name resolves through a stub DNS server (as
Docker's DNS resolves `bot` to every replica); replicas are stub HTTP servers on 127.0.0.x."""

from __future__ import annotations

import asyncio
import ssl
import tempfile
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from tests.conftest import free_port
from tests.deploy.nginx import ROOT, Nginx, rewrite
from tests.stubs.dns_server import StubDNS

NAME = "workers.test"


class Replicas:
    """Stub webhook workers on 127.0.0.x, one port for all (like compose replicas); each records hits."""

    def __init__(self) -> None:
        self.port = free_port()
        self.hits: Counter[str] = Counter()
        self.status: dict[str, int] = {}
        self._runners: list[web.AppRunner] = []

    async def add(self, address: str, status: int) -> None:
        self.status[address] = status

        async def handle(request: web.Request) -> web.Response:
            assert request.method == "POST" and (await request.json())["update_id"] > 0
            self.hits[address] += 1
            return web.json_response({"replica": address}, status=self.status[address])

        app = web.Application()
        app.router.add_post("/telegram/webhook", handle)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, address, self.port).start()
        self._runners.append(runner)

    async def close(self) -> None:
        for runner in self._runners:
            await runner.cleanup()


@pytest.fixture
async def replicas() -> AsyncIterator[Replicas]:
    stubs = Replicas()
    yield stubs
    await stubs.close()


@pytest.fixture
async def dns() -> AsyncIterator[StubDNS]:
    server = StubDNS(NAME)
    await server.start()
    yield server
    server.stop()


async def start_nginx(dns: StubDNS, replicas: Replicas, *, drop: str = "") -> Nginx:
    shipped = (ROOT / "deploy" / "nginx.conf").read_text()
    port = free_port()
    conf = rewrite(
        shipped,
        {
            "listen 8080;": f"listen 127.0.0.1:{port};",
            "resolver 127.0.0.11 ": f"resolver 127.0.0.1:{dns.port} ",
            "set $workers bot:8080;": f"set $workers {NAME}:{replicas.port};",
            **({drop: ""} if drop else {}),
        },
    )
    nginx = Nginx(conf, Path(tempfile.mkdtemp(prefix="sb-nginx-")), port)
    await nginx.start()
    return nginx


async def post_updates(port: int, count: int, first_id: int = 1) -> list[int]:
    statuses = []
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=15)) as http:
        for update_id in range(first_id, first_id + count):
            async with http.post(
                f"http://127.0.0.1:{port}/telegram/webhook",
                json={"update_id": update_id},
                headers={"X-Telegram-Bot-Api-Secret-Token": "s"},
            ) as response:
                statuses.append(response.status)
    return statuses


async def test_every_post_reaches_the_healthy_replica(dns: StubDNS, replicas: Replicas) -> None:
    await replicas.add("127.0.0.2", 200)
    await replicas.add("127.0.0.3", 503)
    dns.addresses = ["127.0.0.2", "127.0.0.3"]
    nginx = await start_nginx(dns, replicas)
    try:
        statuses = await post_updates(nginx.port, 10)
    finally:
        await nginx.stop()
    assert statuses == [200] * 10, nginx.error_log()
    assert replicas.hits["127.0.0.2"] == 10
    assert replicas.hits["127.0.0.3"] >= 1, "the failing replica was tried, then the POST retried"


async def test_without_non_idempotent_a_post_is_lost(dns: StubDNS, replicas: Replicas) -> None:
    """The control: the same set-up with the old directive hands the 503 to Telegram."""
    await replicas.add("127.0.0.2", 200)
    await replicas.add("127.0.0.3", 503)
    dns.addresses = ["127.0.0.2", "127.0.0.3"]
    nginx = await start_nginx(dns, replicas, drop=" non_idempotent")
    try:
        statuses = await post_updates(nginx.port, 10)
    finally:
        await nginx.stop()
    assert 503 in statuses


async def test_a_new_replica_joins_without_restarting_nginx(dns: StubDNS, replicas: Replicas) -> None:
    await replicas.add("127.0.0.2", 200)
    await replicas.add("127.0.0.4", 200)
    dns.addresses = ["127.0.0.2"]
    nginx = await start_nginx(dns, replicas)
    try:
        assert await post_updates(nginx.port, 3) == [200] * 3
        assert replicas.hits["127.0.0.4"] == 0
        dns.addresses = ["127.0.0.2", "127.0.0.4"]  # `docker compose up --scale bot=2`
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 20  # the shipped resolver caches answers for valid=5s
        update_id = 100
        while replicas.hits["127.0.0.4"] == 0:
            assert loop.time() < deadline, "nginx never sent a request to the new replica"
            assert await post_updates(nginx.port, 1, update_id) == [200]
            update_id += 1
            await asyncio.sleep(0.2)
    finally:
        await nginx.stop()


async def test_the_https_profile_terminates_tls_with_a_self_signed_certificate(
    dns: StubDNS, replicas: Replicas, tmp_path: Path
) -> None:
    """deploy/nginx-tls.conf with a certificate from scripts/self-signed-cert: an HTTPS POST that trusts
    only that certificate reaches the load balancer (here a stub replica)."""
    make_cert = await asyncio.create_subprocess_exec(
        str(ROOT / "scripts" / "self-signed-cert"), "127.0.0.1", str(tmp_path), stdout=asyncio.subprocess.PIPE
    )
    out, _ = await make_cert.communicate()
    assert make_cert.returncode == 0 and b"set-webhook --certificate" in out
    await replicas.add("127.0.0.2", 200)
    dns.addresses = ["127.0.0.2"]
    port = free_port()
    conf = rewrite(
        (ROOT / "deploy" / "nginx-tls.conf").read_text(),
        {
            "listen 8443 ssl;": f"listen 127.0.0.1:{port} ssl;",
            "/etc/nginx/tls/": f"{tmp_path}/",
            "resolver 127.0.0.11 ": f"resolver 127.0.0.1:{dns.port} ",
            "set $balancer nginx:8080;": f"set $balancer {NAME}:{replicas.port};",
        },
    )
    nginx = Nginx(conf, Path(tempfile.mkdtemp(prefix="sb-nginx-")), port)
    await nginx.start()
    trust = ssl.create_default_context(cafile=str(tmp_path / "fullchain.pem"))
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=15)) as http:
            url = f"https://127.0.0.1:{port}/telegram/webhook"
            async with http.post(url, json={"update_id": 1}, ssl=trust) as response:
                assert response.status == 200, nginx.error_log()
            with pytest.raises(aiohttp.ClientConnectorCertificateError):
                await http.post(url, json={"update_id": 2})  # the system CAs do not know it
    finally:
        await nginx.stop()
    assert replicas.hits["127.0.0.2"] == 1
