"""A customer's photo as the model should get it: decoded with Pillow, upright (EXIF), the first
frame, transparency on white, shrunk to the size the model's token rule keeps, re-encoded as JPEG
without metadata and wrapped as a base64 data URL.

Memory is bounded: from the header, an image over ``max_pixels`` or ``max_decoded_bytes`` of
decoded pixels is refused before decoding; the decoded image is the only full-size buffer (JPEG
decoded at 1/2-1/8 scale, conversion and reduction a strip at a time); at most
MAX_CONCURRENT_DECODES decodes per process. Failures are MediaError (image): UNREADABLE,
UNSUPPORTED, TOO_BIG."""

from __future__ import annotations

import base64
import io
import threading
import warnings
from dataclasses import dataclass
from typing import Final

from PIL import Image, UnidentifiedImageError

from services.core import media_reasons as reasons
from services.core.errors import MediaError
from services.media.image_tokens import image_cost

FORMATS: Final = ("JPEG", "PNG", "WEBP", "GIF", "BMP", "TIFF")
"""What Telegram clients send as photos and image files, and what every vision model reads once
re-encoded; anything else Pillow might open (PSD, ICO, EPS...) is refused as unsupported."""
MAX_PIXELS: Final = 40_000_000
"""More than any phone camera takes (a 200 MP sensor bins to 50 MP only in its raw mode); a larger
header is a bomb or a scan the model would see at 768 px anyway."""
MAX_DECODED_BYTES: Final = 96 * 2**20
"""The most memory one decoded image may take (``decoded_bytes``: 25 megapixels of RGB or RGBA, which
Pillow stores in four bytes a pixel; a JPEG is counted at the scale libjpeg decodes it at). Pixels
alone do not bound memory: a 155 kB PNG of 40 MP RGBA decodes to 160 MB."""
MAX_CONCURRENT_DECODES: Final = 2
"""Images of one process decoded at the same time (the others wait): four large files at once take
two decoded images' memory, not four."""
DRAFT_GAP: Final = 2.0
"""A JPEG is decoded at a reduced scale only down to this many times the size to send (as Pillow's
``thumbnail``), so the final Lanczos resampling still has pixels to average."""
REDUCING_GAP: Final = 2.0
"""Whole-factor box reduction stops at this many times the size to send; Lanczos does the rest (the
``reducing_gap`` of ``Image.thumbnail``)."""
STRIP_PIXELS: Final = 1 << 20
"""Pixels converted and reduced at a time: a strip's copies are a few MB, whatever the image's size."""
_ORIENTATION: Final = 0x0112
_TRANSPOSE: Final = {
    2: Image.Transpose.FLIP_LEFT_RIGHT,
    3: Image.Transpose.ROTATE_180,
    4: Image.Transpose.FLIP_TOP_BOTTOM,
    5: Image.Transpose.TRANSPOSE,
    6: Image.Transpose.ROTATE_270,
    7: Image.Transpose.TRANSVERSE,
    8: Image.Transpose.ROTATE_90,
}
"""EXIF orientation → the transpose that makes the image upright (ImageOps.exif_transpose's table)."""
_COPIES: Final = {"WEBP": 4}
"""Full-size buffers a format's decoding holds at once: libwebp's animation decoder keeps two frame
buffers from the moment the file is opened, WebPImagePlugin.load copies the frame to bytes and then
into the image; Pillow decodes the others straight into the image."""
_DECODES: Final = threading.BoundedSemaphore(MAX_CONCURRENT_DECODES)


@dataclass(frozen=True, slots=True)
class PreparedImage:
    """The image to send (``data_url``), the size it was sent at and what it costs in prompt tokens."""

    data_url: str
    width: int
    height: int
    detail: str
    tokens: int
    source_bytes: int
    sent_bytes: int


def _refuse(message: str, reason: str, limit: int | None = None) -> MediaError:
    return MediaError(message, kind="image", reason=reason, limit=limit)


def _open(data: bytes, max_pixels: int) -> Image.Image:
    if not data:
        raise _refuse("the image is empty (0 bytes)", reasons.UNREADABLE)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            image = Image.open(io.BytesIO(data), formats=FORMATS)
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as error:
        raise _refuse(f"too many pixels: {error}", reasons.TOO_BIG) from None
    except UnidentifiedImageError:
        kind = _other_format(data)
        if kind is not None:
            raise _refuse(f"{kind} images are not read", reasons.UNSUPPORTED) from None
        raise _refuse("not an image", reasons.UNREADABLE) from None
    except (OSError, ValueError, SyntaxError) as error:
        raise _refuse(f"a corrupt image header: {error}", reasons.UNREADABLE) from None
    width, height = image.size
    if width <= 0 or height <= 0:
        raise _refuse(f"an image of {width}x{height} pixels", reasons.UNREADABLE)
    if width * height > max_pixels:
        raise _refuse(f"{width}x{height} pixels, over {max_pixels}", reasons.TOO_BIG)
    return image


_OTHER_MAGIC: Final = (
    (b"8BPS", "PSD"),
    (b"\x00\x00\x01\x00", "ICO"),
    (b"\x00\x00\x02\x00", "CUR"),
    (b"%!PS", "EPS"),
    (b"\xc5\xd0\xd3\xc6", "EPS"),
    (b"icns", "ICNS"),
    (b"\x00\x00\x00\x0cjP  ", "JPEG 2000"),
    (b"\xff\x4f\xff\x51", "JPEG 2000"),
    (b"DDS ", "DDS"),
    (b"qoif", "QOI"),
    (b"\x59\xa6\x6a\x95", "Sun raster"),
)
"""Leading bytes of image formats Pillow knows but this bot does not read (by their signatures only:
no parser of a format not read here runs on a customer's file)."""


def _other_format(data: bytes) -> str | None:
    """The name of an image format not read here, from its leading bytes: one Pillow knows (PSD, ICO,
    EPS...) or one a phone may send that Pillow does not (HEIC, AVIF, SVG). None: not an image."""
    for magic, name in _OTHER_MAGIC:
        if data.startswith(magic):
            return name
    head = data[:64]
    if head[4:8] == b"ftyp":
        brand = head[8:12]
        if brand in (b"heic", b"heix", b"hevc", b"heim", b"heis", b"mif1", b"msf1"):
            return "HEIC"
        if brand in (b"avif", b"avis"):
            return "AVIF"
    if head.lstrip().startswith((b"<svg", b"<?xml")):
        return "SVG"
    return None


def decoded_bytes(mode: str, width: int, height: int) -> int:
    """What Pillow allocates for ``width`` x ``height`` pixels of ``mode``: one byte a pixel for 1, L
    and P, two for the 16-bit I;16 modes, four for every other mode (RGB is stored as four bytes, as
    are LA, 32-bit integer and float pixels) - the size of the decoded image in memory."""
    if mode in ("1", "L", "P"):
        return width * height
    return width * height * (2 if mode.startswith("I;16") else 4)


def _turned(method: Image.Transpose | None) -> bool:
    return method in (
        Image.Transpose.TRANSPOSE,
        Image.Transpose.TRANSVERSE,
        Image.Transpose.ROTATE_90,
        Image.Transpose.ROTATE_270,
    )


@dataclass(frozen=True, slots=True)
class _Goal:
    """The size to send by the model's rule, from the image's full size as stored and its orientation."""

    model: str
    detail: str
    rule: str | None

    def upright(self, size: tuple[int, int], method: Image.Transpose | None) -> tuple[int, int]:
        """What the rule keeps of the upright image, never enlarged (the full upright size when the
        rule would enlarge it)."""
        width, height = (size[1], size[0]) if _turned(method) else size
        cost = image_cost(width, height, model=self.model, detail=self.detail, rule=self.rule)
        if cost.width <= width and cost.height <= height:
            return cost.width, cost.height
        return width, height

    def stored(self, size: tuple[int, int], method: Image.Transpose | None) -> tuple[int, int]:
        """``upright``, in the orientation the pixels are stored in."""
        width, height = self.upright(size, method)
        return (height, width) if _turned(method) else (width, height)


def _on_white(piece: Image.Image) -> Image.Image:
    """RGB pixels of ``piece``, transparency laid on white."""
    if piece.mode in ("RGBA", "LA", "PA") or (piece.mode == "P" and "transparency" in piece.info):
        rgba = piece.convert("RGBA")
        canvas = Image.new("RGB", rgba.size, (255, 255, 255))
        canvas.paste(rgba, mask=rgba.getchannel("A"))
        return canvas
    return piece.convert("RGB")


def _shrunk(image: Image.Image, raw_goal: tuple[int, int]) -> Image.Image:
    """``image`` (loaded, any mode) as RGB on white, box-reduced by whole factors while it stays at
    least REDUCING_GAP times ``raw_goal`` (``image`` itself when it is RGB and too small to reduce).
    Converted and reduced a strip at a time: the only full-size buffer is the decoded image (Pillow's
    ``reduce`` of an RGBA image makes two full-size copies, ``convert`` one)."""
    width, height = image.size
    fx = max(1, int(width / raw_goal[0] / REDUCING_GAP))
    fy = max(1, int(height / raw_goal[1] / REDUCING_GAP))
    if (fx, fy) == (1, 1) and image.mode == "RGB":
        return image
    out = Image.new("RGB", (-(-width // fx), -(-height // fy)))
    rows = fy * max(1, STRIP_PIXELS // (width * fy))
    for top in range(0, height, rows):
        piece = _on_white(image.crop((0, top, width, min(height, top + rows))))
        out.paste(piece.reduce((fx, fy)) if (fx, fy) != (1, 1) else piece, (0, top // fy))
    return out


def _orientation(source: Image.Image) -> Image.Transpose | None:
    """What turns ``source`` upright (its EXIF or XMP orientation), as ImageOps.exif_transpose reads it."""
    return _TRANSPOSE.get(int(source.getexif().get(_ORIENTATION, 1)))


def _check_budget(source: Image.Image, max_decoded_bytes: int) -> None:
    width, height = source.size
    size = decoded_bytes(source.mode, width, height) * _COPIES.get(str(source.format), 1)
    if size > max_decoded_bytes:
        what = f"{width}x{height} {source.mode} pixels decode to {size} bytes, over {max_decoded_bytes}"
        raise _refuse(what, reasons.TOO_BIG)


def _draft(source: Image.Image, goal: _Goal) -> None:
    """A JPEG decoded at 1/2, 1/4 or 1/8 scale by libjpeg where the size to send allows (still
    DRAFT_GAP times that size); its EXIF is in the header, so nothing is decoded to know it."""
    if source.format in ("JPEG", "MPO"):
        width, height = goal.stored(source.size, _orientation(source))
        source.draft(None, (int(width * DRAFT_GAP), int(height * DRAFT_GAP)))


def _pixels(source: Image.Image, goal: _Goal, max_decoded_bytes: int) -> Image.Image:
    """The first frame of ``source``, upright RGB on white, at the size to send. The decoded size is
    refused over ``max_decoded_bytes`` before any pixel is decoded."""
    full_size = source.size
    try:
        source.seek(0)
        _draft(source, goal)
    except (OSError, ValueError, SyntaxError, EOFError) as error:
        raise _refuse(f"a corrupt image header: {error}", reasons.UNREADABLE) from None
    _check_budget(source, max_decoded_bytes)
    try:
        source.load()
        method = _orientation(source)
        stored = goal.stored(full_size, method)
        pixels = _shrunk(source, stored).resize(stored, Image.Resampling.LANCZOS)  # a copy at the same size
    except (OSError, ValueError, SyntaxError, EOFError) as error:
        raise _refuse(f"the image cannot be decoded: {error}", reasons.UNREADABLE) from None
    return pixels.transpose(method) if method is not None else pixels


def _decoded(data: bytes, goal: _Goal, max_pixels: int, max_decoded_bytes: int) -> Image.Image:
    """``_pixels`` of ``data`` in one of the process's MAX_CONCURRENT_DECODES slots, from the header
    on (libwebp allocates its frame buffers when the file is opened) until the decoded image is gone."""
    with _DECODES:
        source = _open(data, max_pixels)
        try:
            return _pixels(source, goal, max_decoded_bytes)
        finally:
            source.close()
            del source  # the file's decoder buffers go with it, before the slot is given back


def prepare_image(
    data: bytes,
    *,
    model: str,
    detail: str,
    rule: str | None = None,
    max_pixels: int = MAX_PIXELS,
    max_decoded_bytes: int = MAX_DECODED_BYTES,
    quality: int = 85,
) -> PreparedImage:
    """``data`` (a photo's bytes) as a JPEG data URL at the size ``model``'s rule keeps at ``detail``
    (never enlarged), with its token cost. MediaError (image) for what cannot be sent."""
    pixels = _decoded(data, _Goal(model, detail, rule), max_pixels, max_decoded_bytes)
    cost = image_cost(pixels.width, pixels.height, model=model, detail=detail, rule=rule)
    buffer = io.BytesIO()
    pixels.save(buffer, format="JPEG", quality=quality, optimize=True)
    encoded = buffer.getvalue()
    return PreparedImage(
        data_url="data:image/jpeg;base64," + base64.b64encode(encoded).decode("ascii"),
        width=pixels.width,
        height=pixels.height,
        detail=detail,
        tokens=cost.tokens,
        source_bytes=len(data),
        sent_bytes=len(encoded),
    )
