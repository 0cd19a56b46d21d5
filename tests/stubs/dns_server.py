"""A stub DNS server on loopback (UDP) answering A queries for one name from a list the test can change.

nginx's ``resolver`` asks a DNS server (it does not read /etc/hosts), so this stands in for Docker's
embedded DNS that resolves a compose service name to its replicas."""

from __future__ import annotations

import asyncio
import socket
import struct
from dataclasses import dataclass, field
from typing import cast


@dataclass
class StubDNS:
    name: str
    addresses: list[str] = field(default_factory=list)
    ttl: int = 1
    queries: int = 0
    port: int = 0
    _transport: asyncio.DatagramTransport | None = None

    async def start(self, host: str = "127.0.0.1") -> int:
        loop = asyncio.get_running_loop()
        transport, _ = await loop.create_datagram_endpoint(lambda: _Protocol(self), local_addr=(host, 0))
        self._transport = transport
        self.port = int(transport.get_extra_info("sockname")[1])
        return self.port

    def stop(self) -> None:
        if self._transport is not None:
            self._transport.close()

    def answer(self, query: bytes) -> bytes:
        self.queries += 1
        (ident,) = struct.unpack("!H", query[:2])
        labels, offset = [], 12
        while query[offset]:
            length = query[offset]
            labels.append(query[offset + 1 : offset + 1 + length].decode().lower())
            offset += 1 + length
        qtype, _qclass = struct.unpack("!HH", query[offset + 1 : offset + 5])
        question = query[12 : offset + 5]
        found = ".".join(labels) == self.name.lower()
        records = self.addresses if found and qtype == 1 else []
        flags = 0x8180 if found else 0x8183  # response, recursion available; NXDOMAIN when unknown
        header = struct.pack("!HHHHHH", ident, flags, 1, len(records), 0, 0)
        answers = b"".join(
            struct.pack("!HHHIH", 0xC00C, 1, 1, self.ttl, 4) + socket.inet_aton(address) for address in records
        )
        return header + question + answers


class _Protocol(asyncio.DatagramProtocol):
    def __init__(self, server: StubDNS) -> None:
        self._server = server
        self._transport: asyncio.DatagramTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.DatagramTransport, transport)

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        assert self._transport is not None
        self._transport.sendto(self._server.answer(data), addr)
