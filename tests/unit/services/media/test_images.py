"""prepare_image on real image files made with Pillow: the size sent is the one the model's rule
keeps (and the tokens counted are that size's), never enlarged; upright (EXIF), first frame, alpha on
white, CMYK and palette images converted; no metadata sent; every bad file a MediaError reason."""

from __future__ import annotations

import base64
import io

import pytest
from PIL import Image

from services.core import media_reasons as reasons
from services.core.errors import MediaError
from services.media.image_tokens import image_cost
from services.media.images import PreparedImage, prepare_image


def encoded(image: Image.Image, fmt: str = "JPEG", **options: object) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, fmt, **options)
    return buffer.getvalue()


def jpeg(width: int, height: int, color: tuple[int, int, int] = (200, 30, 30)) -> bytes:
    return encoded(Image.new("RGB", (width, height), color))


def sent(prepared: PreparedImage) -> Image.Image:
    head, _, payload = prepared.data_url.partition(",")
    assert head == "data:image/jpeg;base64"
    image = Image.open(io.BytesIO(base64.b64decode(payload)))
    assert image.format == "JPEG" and image.size == (prepared.width, prepared.height)
    assert len(base64.b64decode(payload)) == prepared.sent_bytes
    return image


@pytest.mark.parametrize(
    ("model", "detail", "size", "expected"),
    [
        ("gpt-4o", "high", (1600, 1200), ((1024, 768), 765)),
        ("gpt-4o", "auto", (2048, 4096), ((768, 1536), 1105)),
        ("gpt-4o", "low", (1600, 1200), ((512, 384), 85)),
        ("gpt-4o-mini", "high", (1024, 1024), ((768, 768), 2833 + 4 * 5667)),
        ("gpt-4.1-mini", "high", (1800, 2400), ((1056, 1408), 2353)),  # 1452 patches x 1.62
        ("gpt-4.1-nano", "auto", (300, 200), ((300, 200), 173)),  # 10x7 patches x 2.46, not enlarged
    ],
)
def test_the_image_is_sent_at_the_size_its_rule_keeps(
    model: str, detail: str, size: tuple[int, int], expected: tuple[tuple[int, int], int]
) -> None:
    prepared = prepare_image(jpeg(*size), model=model, detail=detail)
    assert ((prepared.width, prepared.height), prepared.tokens) == expected
    assert sent(prepared).size == expected[0]
    again = image_cost(prepared.width, prepared.height, model=model, detail=detail)
    assert again.tokens == prepared.tokens, "the shrunk image costs what the original was counted at"
    assert prepared.detail == detail and prepared.source_bytes == len(jpeg(*size))


def test_an_explicit_rule_counts_an_unknown_model() -> None:
    assert prepare_image(jpeg(1024, 1024), model="acme-vision", detail="high", rule="gpt-4o").tokens == 765
    conservative = prepare_image(jpeg(1024, 1024), model="acme-vision", detail="high")
    assert conservative.tokens >= 2833 + 4 * 5667 and (conservative.width, conservative.height) == (768, 768)


def test_exif_orientation_is_applied_and_metadata_dropped() -> None:
    image = Image.new("RGB", (400, 200), (10, 200, 10))
    exif = Image.Exif()
    exif[0x0112] = 6  # rotate 90 degrees clockwise to view
    exif[0x010F] = "SecretCam"  # Make
    exif[0x8825] = {2: (55.0, 45.0, 0.0)}  # GPS latitude
    prepared = prepare_image(encoded(image, exif=exif.tobytes()), model="gpt-4o", detail="high")
    out = sent(prepared)
    assert out.size == (200, 400), "upright, as the customer saw it"
    assert not out.getexif() and "exif" not in out.info
    assert b"SecretCam" not in base64.b64decode(prepared.data_url.split(",", 1)[1])


def test_transparency_lies_on_white_and_the_first_frame_of_an_animation_is_sent() -> None:
    clear = Image.new("RGBA", (64, 64), (0, 0, 0, 0))
    pixel = sent(prepare_image(encoded(clear, "PNG"), model="gpt-4o", detail="high")).convert("RGB").getpixel((32, 32))
    assert isinstance(pixel, tuple) and min(pixel) > 240, "not black: transparency on white"
    frames = [Image.new("RGB", (64, 64), color) for color in ((250, 0, 0), (0, 0, 250))]
    gif = encoded(frames[0], "GIF", save_all=True, append_images=frames[1:], duration=100, loop=0)
    first = sent(prepare_image(gif, model="gpt-4o", detail="high")).convert("RGB").getpixel((32, 32))
    assert isinstance(first, tuple) and first[0] > 200 and first[2] < 60


@pytest.mark.parametrize("mode", ["CMYK", "L", "P", "I;16"])
def test_other_colour_modes_are_sent_as_rgb_jpeg(mode: str) -> None:
    image = Image.new("RGB", (120, 80), (30, 120, 220)).convert(mode if mode != "I;16" else "I").convert(mode)
    fmt = "TIFF" if mode in ("CMYK", "I;16") else "PNG"
    out = sent(prepare_image(encoded(image, fmt), model="gpt-4o", detail="high"))
    assert out.mode == "RGB" and out.size == (120, 80)


@pytest.mark.parametrize("fmt", ["PNG", "WEBP", "BMP", "GIF", "TIFF"])
def test_the_formats_telegram_clients_send_are_read(fmt: str) -> None:
    prepared = prepare_image(encoded(Image.new("RGB", (900, 600), (1, 2, 3)), fmt), model="gpt-4o", detail="high")
    assert (prepared.width, prepared.height) == (900, 600)


def refusal(data: bytes, **options: object) -> MediaError:
    with pytest.raises(MediaError) as caught:
        prepare_image(data, model="gpt-4o", detail="high", **options)  # type: ignore[arg-type]
    assert caught.value.kind == "image"
    return caught.value


def test_empty_truncated_and_random_bytes_are_unreadable() -> None:
    assert refusal(b"").reason == reasons.UNREADABLE
    assert refusal(jpeg(800, 600)[:300]).reason == reasons.UNREADABLE
    assert refusal(b"\x00" * 1000).reason == reasons.UNREADABLE
    assert refusal(b"%PDF-1.7 not an image").reason == reasons.UNREADABLE


def test_formats_not_read_here_are_unsupported() -> None:
    icon = encoded(Image.new("RGB", (32, 32)), "ICO")
    assert refusal(icon).reason == reasons.UNSUPPORTED
    heic = b"\x00\x00\x00\x18ftypheic\x00\x00\x00\x00mif1heic" + b"\x00" * 64
    assert refusal(heic).reason == reasons.UNSUPPORTED
    assert refusal(b'<svg xmlns="http://www.w3.org/2000/svg"/>').reason == reasons.UNSUPPORTED


def test_a_decompression_bomb_is_refused_from_its_header() -> None:
    bomb = encoded(Image.new("L", (8000, 6000)), "PNG", optimize=True)  # 48 MP in a few KB
    assert len(bomb) < 200_000
    assert refusal(bomb).reason == reasons.TOO_BIG
    assert refusal(jpeg(1000, 1000), max_pixels=999_999).reason == reasons.TOO_BIG
