"""All of KNOWLEDGE_DIR read into passages: subfolders in sorted order, hidden and editor files
ignored, symlinks never followed out of the folder, one WARNING line per skipped file (never fatal).
``fingerprint`` is the cheap change check (names, sizes, times) the live refresh polls."""

from __future__ import annotations

import hashlib
import logging
import os
from dataclasses import dataclass
from pathlib import Path

from services.engine.tokens import TokenCounter
from services.knowledge.documents import SUFFIXES, UnreadableDocument
from services.knowledge.passages import cut_passages
from services.knowledge.reading import read_document
from services.ports.knowledge import Passage, SkippedFile

log = logging.getLogger(__name__)

_EDITOR_TEMP = ("~", ".swp", ".swx", ".tmp", ".part", ".crdownload")


@dataclass(frozen=True, slots=True)
class DocumentInfo:
    path: str
    title: str
    url: str | None
    passages: int
    tokens: int


@dataclass(frozen=True, slots=True)
class Corpus:
    passages: tuple[Passage, ...]
    documents: tuple[DocumentInfo, ...]
    skipped: tuple[SkippedFile, ...]
    fingerprint: str


def _files(root: Path) -> list[tuple[str, Path]]:
    """(relative name, path) of every candidate file under ``root``, sorted; nothing outside it."""
    real_root = root.resolve()
    found: list[tuple[str, Path]] = []
    for folder, dirs, names in os.walk(root, followlinks=False):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(names):
            if name.startswith(".") or name.endswith(_EDITOR_TEMP):
                continue
            path = Path(folder) / name
            try:
                if not path.resolve().is_relative_to(real_root) or not path.is_file():
                    continue
            except OSError:
                continue
            found.append((path.relative_to(root).as_posix(), path))
    return found


def fingerprint(root: Path) -> str:
    """A hash of every file's name, size and modification time: changes when any file does."""
    digest = hashlib.sha256()
    for relative, path in _files(root):
        try:
            stat = path.stat()
        except OSError:
            continue
        digest.update(f"{relative}\x1f{stat.st_size}\x1f{stat.st_mtime_ns}\n".encode("utf-8", "replace"))
    return digest.hexdigest()[:16]


def read_corpus(root: Path, *, counter: TokenCounter, passage_tokens: int, max_file_bytes: int) -> Corpus:
    """Every readable document of ``root`` as passages; unreadable files skipped with their reason."""
    if not root.is_dir():
        reason = "KNOWLEDGE_DIR is not a readable folder"
        log.warning("knowledge: %s: %s", root, reason)
        return Corpus((), (), (SkippedFile(str(root), reason),), "")
    passages: list[Passage] = []
    documents: list[DocumentInfo] = []
    skipped: list[SkippedFile] = []
    seen: set[str] = set()
    for relative, path in _files(root):
        if path.suffix.lower() not in SUFFIXES:
            reason = f"unsupported type {path.suffix or '(no suffix)'}"
            log.warning("knowledge: skipped %s: %s", relative, reason)
            skipped.append(SkippedFile(relative, reason))
            continue
        try:
            document = read_document(path, relative=relative, max_bytes=max_file_bytes)
        except UnreadableDocument as exc:
            log.warning("knowledge: skipped %s: %s", relative, exc)
            skipped.append(SkippedFile(relative, str(exc)))
            continue
        except (OSError, RecursionError, MemoryError) as exc:
            log.warning("knowledge: skipped %s: cannot read: %s", relative, type(exc).__name__)
            skipped.append(SkippedFile(relative, f"cannot read: {type(exc).__name__}"))
            continue
        cut = [p for p in cut_passages(document, counter=counter, max_tokens=passage_tokens) if p.id not in seen]
        seen.update(p.id for p in cut)
        passages.extend(cut)
        documents.append(DocumentInfo(relative, document.title, document.url, len(cut), sum(p.tokens for p in cut)))
    return Corpus(tuple(passages), tuple(documents), tuple(skipped), fingerprint(root))
