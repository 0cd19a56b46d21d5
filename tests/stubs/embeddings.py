"""``POST /v1/embeddings`` of the stub model server, in the OpenAI shape (``data[{object, index,
embedding}]``, ``model``, ``usage``; ``input`` a string or a list). Vectors are deterministic: words
(of three letters or more; their first five, a crude stem) hashed into 2048 dimensions and normalized, so texts sharing
words are near. Every request is recorded; ``mode`` injects the faults a provider shows."""

from __future__ import annotations

import asyncio
import hashlib
import math
import re
from dataclasses import dataclass, field
from typing import Any, Literal

from aiohttp import web

DIMENSIONS = 2048
Mode = Literal["ok", "error", "rate_limited", "hang", "wrong_count"]


def stub_vector(text: str) -> list[float]:
    vector = [0.0] * DIMENSIONS
    for word in re.findall(r"\w{3,}", text.casefold()):
        digest = hashlib.blake2b(word[:5].encode(), digest_size=4).digest()
        vector[int.from_bytes(digest, "big") % DIMENSIONS] += 1.0
    norm = math.sqrt(sum(v * v for v in vector)) or 1.0
    return [v / norm for v in vector]


@dataclass
class StubEmbeddings:
    mode: Mode = "ok"
    requests: list[list[str]] = field(default_factory=list)
    """The inputs of every request, in order."""
    gate: asyncio.Event | None = None
    """While set to an Event not yet set, requests are recorded on arrival and answered once it is."""
    _stopping: asyncio.Event = field(default_factory=asyncio.Event)

    def stop(self) -> None:
        """Release the requests held by ``hang`` (the server's shutdown would wait for them)."""
        self._stopping.set()

    @property
    def embedded(self) -> list[str]:
        """Every text embedded, in order (a passage embedded twice appears twice)."""
        return [text for inputs in self.requests for text in inputs]

    async def handle(self, request: web.Request) -> web.Response:
        body: dict[str, Any] = await request.json()
        inputs = body["input"] if isinstance(body["input"], list) else [body["input"]]
        self.requests.append([str(text) for text in inputs])
        if self.gate is not None:
            await self.gate.wait()
        if self.mode == "error":
            error = {"message": "The server had an error", "type": "server_error", "code": None}
            return web.json_response({"error": error}, status=500)
        if self.mode == "rate_limited":
            error = {"message": "Rate limit reached", "type": "requests", "code": "rate_limit_exceeded"}
            return web.json_response({"error": error}, status=429, headers={"retry-after": "20"})
        if self.mode == "hang":  # held until the stub stops (an hour at most)
            await asyncio.wait_for(self._stopping.wait(), 3600)
        vectors = [stub_vector(str(text)) for text in inputs]
        if self.mode == "wrong_count":
            vectors = vectors[:-1]
        data = [{"object": "embedding", "index": i, "embedding": v} for i, v in enumerate(vectors)]
        tokens = sum(len(str(text).split()) for text in inputs)
        return web.json_response(
            {
                "object": "list",
                "data": data,
                "model": body.get("model"),
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
            }
        )
