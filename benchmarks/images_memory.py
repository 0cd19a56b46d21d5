"""Peak memory of preparing one image, and four at once on four threads, per kind of image: this
code beside a git revision's (before the decoded-bytes budget, by default), in the same run.

    .venv/bin/python -m benchmarks.images_memory [--old REV] [--kinds NAME,...]

Each figure is the rise of a fresh child's peak resident set (VmHWM) over what it held after the
imports and a warm-up image: Pillow's buffers are C memory tracemalloc does not see. The files are
made here; the hostile ones are of one colour (a 40-megapixel PNG is a 169 kB file)."""

from __future__ import annotations

import argparse
import importlib.util
import io
import json
import resource
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from PIL import Image

from benchmarks.common import machine

ROOT = Path(__file__).resolve().parent.parent
OLD_REV: Final = "3f62aa1"
"""The last revision whose images.py decoded an image in full before shrinking it."""


@dataclass(frozen=True)
class Kind:
    name: str
    mode: str
    size: tuple[int, int]
    fmt: str

    def encode(self) -> bytes:
        colour: Any = {"P": 3, "L": 90, "I;16": 40_000, "RGBA": (10, 200, 30, 128)}.get(self.mode, (10, 200, 30))
        image = Image.new(self.mode, self.size, colour)
        buffer = io.BytesIO()
        image.save(buffer, self.fmt, **({"optimize": True} if self.fmt == "PNG" else {}))
        return buffer.getvalue()


KINDS: Final = (
    Kind("png-40mp-rgba", "RGBA", (6400, 6200), "PNG"),
    Kind("png-25mp-rgba", "RGBA", (5000, 5000), "PNG"),
    Kind("png-40mp-palette", "P", (6400, 6200), "PNG"),
    Kind("png-40mp-grey16", "I;16", (6400, 6200), "PNG"),
    Kind("jpeg-40mp", "RGB", (7296, 5472), "JPEG"),
    Kind("jpeg-12mp", "RGB", (4032, 3024), "JPEG"),
    Kind("webp-16mp-rgba", "RGBA", (4000, 4000), "WEBP"),
    Kind("webp-6mp-rgba", "RGBA", (2500, 2500), "WEBP"),
    Kind("tiff-25mp-rgb", "RGB", (5000, 5000), "TIFF"),
    Kind("gif-40mp", "P", (6400, 6200), "GIF"),
)


def load_prepare(source: str) -> Callable[..., Any]:
    """``prepare_image`` of this tree (``source`` "new") or of the images.py at path ``source``."""
    if source == "new":
        from services.media.images import prepare_image

        return prepare_image
    spec = importlib.util.spec_from_file_location("old_images", source)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    prepare: Callable[..., Any] = module.prepare_image
    return prepare


def peak_rss_kb() -> int:
    """This process's peak resident set in kB: VmHWM, which starts afresh at exec (``ru_maxrss``
    keeps the parent's peak across fork and exec on Linux, so a child would inherit the parent's)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def child(source: str, path: str, threads: int) -> dict[str, Any]:
    """In this (fresh) process: ``threads`` threads prepare the file at ``path`` at once; the rise of
    the peak resident set in MB, and what each got (a size or the refusal's reason)."""
    prepare = load_prepare(source)
    data = Path(path).read_bytes()
    warm = io.BytesIO()
    Image.new("RGB", (64, 64)).save(warm, "PNG")
    prepare(warm.getvalue(), model="gpt-4o", detail="high")
    before = peak_rss_kb()
    outcomes: list[str] = []

    def one() -> None:
        try:
            prepared = prepare(data, model="gpt-4o", detail="high")
            outcomes.append(f"{prepared.width}x{prepared.height}")
        except Exception as error:  # the refusal is an outcome to report
            outcomes.append(str(getattr(error, "reason", type(error).__name__)))

    workers = [threading.Thread(target=one) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    peak = peak_rss_kb()
    return {"peak_mb": (peak - before) / 1024, "outcomes": sorted(set(outcomes))}


def measure(source: str, data: bytes, threads: int = 1) -> dict[str, Any]:
    """``child`` in a fresh interpreter (so no earlier image's memory hides this one's peak)."""
    with tempfile.NamedTemporaryFile(suffix=".img") as file:
        file.write(data)
        file.flush()
        command = [sys.executable, "-m", "benchmarks.images_memory", "--child", source, file.name, str(threads)]
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=True, timeout=600)
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def old_source(rev: str, folder: Path) -> str | None:
    """The images.py of ``rev`` written to ``folder``; None when git cannot show it."""
    done = subprocess.run(
        ["git", "show", f"{rev}:services/media/images.py"], cwd=ROOT, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        return None
    path = folder / "old_images.py"
    path.write_text(done.stdout)
    return str(path)


def cell(result: dict[str, Any] | None) -> str:
    if result is None:
        return "-"
    return f"{result['peak_mb']:.0f} MB ({', '.join(result['outcomes'])})"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--old", default=OLD_REV, help=f"git revision to compare with (default {OLD_REV})")
    parser.add_argument("--kinds", default="", help="comma-separated kind names (default: all)")
    parser.add_argument("--child", nargs=3, metavar=("SOURCE", "PATH", "THREADS"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child[0], args.child[1], int(args.child[2]))))
        return
    wanted = set(filter(None, args.kinds.split(",")))
    print(f"# peak memory of prepare_image, MB over the process's before ({machine()})")
    print(f"| image | file | 1 image, {args.old} | 1 image, now | 4 at once, {args.old} | 4 at once, now |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    with tempfile.TemporaryDirectory() as folder:
        old = old_source(args.old, Path(folder))
        for kind in KINDS:
            if wanted and kind.name not in wanted:
                continue
            data = kind.encode()
            row = [measure(source, data, n) if source else None for n in (1, 4) for source in (old, "new")]
            size = f"{len(data) / 1024:.0f} kB"
            label = f"{kind.fmt} {kind.size[0]}x{kind.size[1]} {kind.mode}"
            print(f"| {label} | {size} | " + " | ".join(cell(result) for result in row) + " |", flush=True)


if __name__ == "__main__":
    main()
