"""A customer's photo as the model should get it: decoded with Pillow, turned upright (EXIF), the
first frame of an animation, transparency laid on white, shrunk to the size the model's token rule
keeps, re-encoded as JPEG without metadata (no GPS, no camera serial) and wrapped as a base64 data URL.

Decompression bombs are refused from the header, before any pixel is decoded (``max_pixels``).
Failures are MediaError (image): UNREADABLE for no bytes or what is not a whole image,
UNSUPPORTED for a format not read here, TOO_BIG for too many pixels.
"""

from __future__ import annotations

import base64
import io
import warnings
from dataclasses import dataclass
from typing import Final

from PIL import Image, ImageOps, UnidentifiedImageError

from services.errors import MediaError
from services.media import reasons
from services.media.image_tokens import image_cost

FORMATS: Final = ("JPEG", "PNG", "WEBP", "GIF", "BMP", "TIFF")
"""What Telegram clients send as photos and image files, and what every vision model reads once
re-encoded; anything else Pillow might open (PSD, ICO, EPS...) is refused as unsupported."""
MAX_PIXELS: Final = 40_000_000
"""More than any phone camera takes (a 200 MP sensor bins to 50 MP only in its raw mode); a larger
header is a bomb or a scan the model would see at 768 px anyway."""


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


def _other_format(data: bytes) -> str | None:
    """The name of an image format not read here: one Pillow knows (PSD, ICO...; only the header is
    read, no pixel) or one a phone may send that Pillow does not (HEIC, AVIF, SVG). None: not an image."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with Image.open(io.BytesIO(data)) as other:
                return str(other.format or "this")
    except Exception:  # any failure: Pillow does not know it either
        pass
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


def _pixels(image: Image.Image) -> Image.Image:
    """Upright RGB pixels of the first frame, transparency on white; UNREADABLE if truncated."""
    try:
        image.seek(0)
        image.load()
        upright = ImageOps.exif_transpose(image) or image
        if upright.mode in ("RGBA", "LA", "PA") or (upright.mode == "P" and "transparency" in upright.info):
            rgba = upright.convert("RGBA")
            canvas = Image.new("RGB", rgba.size, (255, 255, 255))
            canvas.paste(rgba, mask=rgba.getchannel("A"))
            return canvas
        return upright.convert("RGB")
    except (OSError, ValueError, SyntaxError, EOFError) as error:
        raise _refuse(f"the image cannot be decoded: {error}", reasons.UNREADABLE) from None


def prepare_image(
    data: bytes,
    *,
    model: str,
    detail: str,
    rule: str | None = None,
    max_pixels: int = MAX_PIXELS,
    quality: int = 85,
) -> PreparedImage:
    """``data`` (a photo's bytes) as a JPEG data URL at the size ``model``'s rule keeps at ``detail``
    (never enlarged), with its token cost. MediaError (image) for what cannot be sent."""
    with _open(data, max_pixels) as source:
        pixels = _pixels(source)
    cost = image_cost(pixels.width, pixels.height, model=model, detail=detail, rule=rule)
    if (cost.width, cost.height) != pixels.size and cost.width <= pixels.width and cost.height <= pixels.height:
        pixels = pixels.resize((cost.width, cost.height), Image.Resampling.LANCZOS, reducing_gap=3.0)
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
