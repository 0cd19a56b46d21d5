"""Image parts in the stub model server's chat requests, read the way OpenAI reads them.

A user message's content may be a list of parts: ``{"type": "text", "text"}`` and ``{"type":
"image_url", "image_url": {"url": "data:image/png;base64,...", "detail"}}``. This decodes the data
URLs, reads the image's size from its header (PNG, JPEG, GIF, WebP: no imaging library) and answers
OpenAI's 400s: a model without vision, an image that is not one, a URL the stub will not fetch (so a
Telegram file URL, bot token inside, sent to the model fails loudly).
"""

from __future__ import annotations

import base64
import binascii
import re
import struct
from dataclasses import dataclass
from typing import Any

from aiohttp import web

_DATA_URL = re.compile(r"data:(image/[\w.+-]+);base64,(.*)", re.S)


@dataclass(frozen=True)
class ImageInput:
    """One image part of a request: where it is (message and part index), its bytes and size."""

    message: int
    part: int
    url: str
    detail: str
    mime: str | None
    data: bytes | None
    size: tuple[int, int] | None


def image_size(data: bytes) -> tuple[int, int] | None:
    """Width and height from a PNG, GIF, JPEG or WebP header; None when it is none of them."""
    if data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR":
        return struct.unpack(">II", data[16:24])  # type: ignore[return-value]
    if data[:6] in (b"GIF87a", b"GIF89a") and len(data) >= 10:
        return struct.unpack("<HH", data[6:10])  # type: ignore[return-value]
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP" and len(data) >= 30:
        chunk = data[12:16]
        if chunk == b"VP8 ":
            width, height = struct.unpack("<HH", data[26:30])
            return width & 0x3FFF, height & 0x3FFF
        if chunk == b"VP8L":
            bits = int.from_bytes(data[21:25], "little")
            return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
        if chunk == b"VP8X":
            return int.from_bytes(data[24:27], "little") + 1, int.from_bytes(data[27:30], "little") + 1
        return None
    if data[:2] == b"\xff\xd8":
        return _jpeg_size(data)
    return None


def _jpeg_size(data: bytes) -> tuple[int, int] | None:
    at = 2
    while at + 9 < len(data):
        if data[at] != 0xFF:
            return None
        marker = data[at + 1]
        if marker in (0xD8, 0x01) or 0xD0 <= marker <= 0xD7:  # markers without a length
            at += 2
            continue
        length = int.from_bytes(data[at + 2 : at + 4], "big")
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):  # a start of frame
            height, width = struct.unpack(">HH", data[at + 5 : at + 9])
            return (width, height) if width and height else None
        at += 2 + length
    return None


def text_of(content: Any) -> str:
    """A message's text: the content string, or its text parts joined."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(p.get("text", "")) for p in content if isinstance(p, dict) and p.get("type") == "text")
    return ""


def images_in(body: dict[str, Any]) -> list[ImageInput]:
    """Every image part of a chat request, in order."""
    found = []
    for m, message in enumerate(body.get("messages") or []):
        content = message.get("content")
        if not isinstance(content, list):
            continue
        for p, part in enumerate(content):
            if not (isinstance(part, dict) and part.get("type") == "image_url"):
                continue
            image = part.get("image_url") or {}
            url, detail = str(image.get("url", "")), str(image.get("detail") or "auto")
            match = _DATA_URL.fullmatch(url)
            data = None
            if match:
                try:
                    data = base64.b64decode(match.group(2), validate=True)
                except (binascii.Error, ValueError):
                    data = None
            size = image_size(data) if data else None
            found.append(ImageInput(m, p, url, detail, match.group(1) if match else None, data, size))
    return found


def image_refusal(images: list[ImageInput], *, vision: bool) -> web.Response | None:
    """OpenAI's 400 for the request's images, or None when it would take them."""
    if images and not vision:
        first = images[0]
        message = "Invalid content type. image_url is only supported by certain models."
        return _invalid(message, f"messages.[{first.message}].content.[{first.part}].type", None)
    for image in images:
        if image.mime is None:
            return _invalid(f"Error while downloading {image.url[:80]}.", "url", "invalid_image_url")
        if image.size is None or image.detail not in ("low", "high", "auto"):
            message = (
                "You uploaded an unsupported image. Please make sure your image is below 20 MB in size and is of "
                "one the following formats: ['png', 'jpeg', 'gif', 'webp']."
            )
            return _invalid(message, None, "invalid_image_format")
    return None


def _invalid(message: str, param: str | None, code: str | None) -> web.Response:
    error = {"message": message, "type": "invalid_request_error", "param": param, "code": code}
    return web.json_response({"error": error}, status=400)
