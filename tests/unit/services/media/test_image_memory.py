"""Memory of preparing an image, measured: the peak resident set of a fresh child process
(benchmarks/images_memory.py: Pillow's pixels are C memory that tracemalloc does not see) while it
prepares one hostile file, or four at once on four threads as the bot does (asyncio.to_thread).

The hostile files are of one colour: a 40-megapixel RGBA PNG is a 165 kB file that decodes to 160 MB
(refused from its header, by decoded bytes), a 25-megapixel one (107 kB) decodes to 100 MB, just under
the budget (decoded, shrunk, sent). Before the budget the first took 644 MB, four at once 2.6 GB."""

from __future__ import annotations

import base64
import io
from collections.abc import Iterator

import pytest
from PIL import Image

from benchmarks.images_memory import measure
from services.core import media_reasons as reasons
from services.core.errors import MediaError
from services.media.images import MAX_DECODED_BYTES, decoded_bytes, prepare_image

PER_IMAGE_MB = 150
"""The documented bound of one image (docs/media.md): the decoded bytes (at most 96 MiB) and 30 MB."""
FOUR_AT_ONCE_MB = 400
"""The issue's bound for four such files at once in one process."""


def png(mode: str, size: tuple[int, int], colour: object) -> bytes:
    buffer = io.BytesIO()
    Image.new(mode, size, colour).save(buffer, "PNG", optimize=True)  # type: ignore[arg-type]
    return buffer.getvalue()


@pytest.fixture(scope="module")
def at_budget() -> Iterator[bytes]:
    """25 MP of RGBA: 100 MB decoded, under the budget (95.4 MiB of 96 MiB)."""
    data = png("RGBA", (5000, 5000), (10, 200, 30, 128))
    assert decoded_bytes("RGBA", 5000, 5000) <= MAX_DECODED_BYTES and len(data) < 200_000
    yield data


@pytest.fixture(scope="module")
def over_budget() -> Iterator[bytes]:
    """40 MP of RGBA (under the 40-megapixel cap): 160 MB decoded."""
    data = png("RGBA", (6400, 6200), (10, 200, 30, 128))
    assert len(data) < 200_000
    yield data


def test_decoded_bytes_count_how_pillow_stores_each_mode() -> None:
    assert decoded_bytes("L", 100, 10) == decoded_bytes("P", 100, 10) == decoded_bytes("1", 100, 10) == 1000
    assert decoded_bytes("I;16", 100, 10) == 2000
    for mode in ("RGB", "RGBA", "LA", "I", "F", "CMYK", "YCbCr"):
        assert decoded_bytes(mode, 100, 10) == 4000, mode  # RGB too: Pillow keeps four bytes a pixel


def test_an_image_over_the_decoded_budget_is_refused_from_its_header(over_budget: bytes) -> None:
    with pytest.raises(MediaError) as caught:
        prepare_image(over_budget, model="gpt-4o", detail="high")
    assert caught.value.reason == reasons.TOO_BIG and caught.value.kind == "image"
    assert caught.value.limit is None, "the customer is told 'too big', not a byte figure of a 165 kB file"
    grey16 = png("I;16", (4000, 4000), 40_000)  # 32 MB decoded where Pillow keeps 16-bit grey as I;16
    with Image.open(io.BytesIO(grey16)) as opened:
        mode = opened.mode  # older Pillow (10.1) opens a 16-bit PNG as 32-bit I: 64 MB
    budget = decoded_bytes(mode, 4000, 4000)
    assert budget == (32_000_000 if mode.startswith("I;16") else 64_000_000), mode
    assert prepare_image(grey16, model="gpt-4o", detail="high", max_decoded_bytes=budget).width == 768
    with pytest.raises(MediaError):
        prepare_image(grey16, model="gpt-4o", detail="high", max_decoded_bytes=budget - 1)


def test_a_jpeg_is_budgeted_at_the_scale_libjpeg_decodes_it_at() -> None:
    buffer = io.BytesIO()
    Image.new("RGB", (6000, 4000), (200, 30, 30)).save(buffer, "JPEG")  # 96 MB in full, 1/2 scale: 24 MB
    prepared = prepare_image(buffer.getvalue(), model="gpt-4o", detail="high", max_decoded_bytes=25_000_000)
    assert (prepared.width, prepared.height) == (1152, 768)


@pytest.mark.slow  # measured in a new interpreter
@pytest.mark.parametrize("threads", [1, 4])
def test_peak_memory_of_a_large_png_is_bounded(at_budget: bytes, threads: int) -> None:
    result = measure("new", at_budget, threads)
    assert result["outcomes"] == ["768x768"], "decoded and sent, not refused"
    bound = PER_IMAGE_MB if threads == 1 else FOUR_AT_ONCE_MB
    assert result["peak_mb"] < bound, f"{threads} image(s) at once raised the peak by {result['peak_mb']:.0f} MB"


@pytest.mark.slow  # measured in a new interpreter
def test_four_hostile_pngs_at_once_cost_next_to_nothing(over_budget: bytes) -> None:
    result = measure("new", over_budget, 4)
    assert result["outcomes"] == [reasons.TOO_BIG]
    assert result["peak_mb"] < FOUR_AT_ONCE_MB / 4


@pytest.mark.parametrize(("fmt", "width", "budget"), [("JPEG", 8000, 40_000_000), ("PNG", 4000, MAX_DECODED_BYTES)])
def test_a_turned_image_decoded_shrunk_is_upright_at_the_exact_size(fmt: str, width: int, budget: int) -> None:
    """The orientation is read before decoding (JPEG: the size to draft to) or after (PNG: its EXIF
    may follow the pixels); either way the sent image is upright, at the rule's size. The JPEG fits
    the budget only at the half scale libjpeg decodes it at (128 MB in full)."""
    image = Image.new("RGB", (width, width // 2), (10, 200, 10))
    image.paste((250, 0, 0), (0, 0, width, width // 20))  # a red band along the top as stored
    exif = Image.Exif()
    exif[0x0112] = 6  # rotate 90 degrees clockwise to view: the band ends on the right
    buffer = io.BytesIO()
    image.save(buffer, fmt, exif=exif.tobytes())
    prepared = prepare_image(buffer.getvalue(), model="gpt-4o", detail="high", max_decoded_bytes=budget)
    assert (prepared.width, prepared.height) == (768, 1536)
    sent = Image.open(io.BytesIO(base64.b64decode(prepared.data_url.split(",", 1)[1]))).convert("RGB")
    right, left = sent.getpixel((760, 768)), sent.getpixel((8, 768))
    assert isinstance(right, tuple) and isinstance(left, tuple)
    assert right[0] > 200 and left[0] < 60, "turned upright: the top band is on the right"
