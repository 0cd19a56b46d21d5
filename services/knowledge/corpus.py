"""All of KNOWLEDGE_DIR read into passages: subfolders in sorted order, hidden and editor files
ignored, symlinks never followed out of the folder, one WARNING line per skipped file (never fatal).
``fingerprint`` is the cheap change check (names, sizes, times) the live refresh polls; with
``ParsedFiles`` a refresh parses only the files whose size or time changed."""

from __future__ import annotations

import hashlib
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path

from services.core.knowledge import Passage, SkippedFile
from services.core.tokens import TokenCounter
from services.knowledge.documents import SUFFIXES, Document, UnreadableDocument
from services.knowledge.passages import cut_passages
from services.knowledge.progress import IndexProgress, ProgressSink, no_progress
from services.knowledge.reading import read_document

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


RACY_NS = 2_000_000_000
"""A file modified this recently may change again within the same timestamp tick (same size, same
time, new text: git's "racy" entries): it is never taken as unchanged until it is older."""


def _racy(stamp_ns: int) -> bool:
    return time.time_ns() - stamp_ns < RACY_NS


class ParsedFiles:
    """What earlier reads made of each file, by name, size and modification time (its document and
    passages, or why it was skipped): a big PDF is not parsed and cut again because a small FAQ file
    next to it was edited."""

    def __init__(self) -> None:
        self._entries: dict[str, tuple[tuple[int, int, int], Parsed]] = {}
        self.parses = 0
        """Files parsed so far (not found here)."""

    def get(self, relative: str, stamp: tuple[int, int, int]) -> Parsed | None:
        entry = self._entries.get(relative)
        return entry[1] if entry is not None and entry[0] == stamp else None

    def put(self, relative: str, stamp: tuple[int, int, int], outcome: Parsed) -> None:
        self.parses += 1
        if _racy(stamp[1]):  # it may still change within its tick: parsed again next time
            self._entries.pop(relative, None)
        else:
            self._entries[relative] = (stamp, outcome)

    def keep(self, names: set[str]) -> None:
        """Forget the files that are gone."""
        for name in set(self._entries) - names:
            del self._entries[name]


Parsed = tuple[Document, tuple[Passage, ...]] | str
"""A file read: its document and passages, or why it is skipped."""


def _parse(path: Path, relative: str, max_file_bytes: int, counter: TokenCounter, passage_tokens: int) -> Parsed:
    """The document and its passages, or why it is skipped (logged here, once per parse)."""
    try:
        document = read_document(path, relative=relative, max_bytes=max_file_bytes)
        return document, tuple(cut_passages(document, counter=counter, max_tokens=passage_tokens))
    except UnreadableDocument as exc:
        reason = str(exc)
    except (OSError, RecursionError, MemoryError) as exc:
        reason = f"cannot read: {type(exc).__name__}"
    log.warning("knowledge: skipped %s: %s", relative, reason)
    return reason


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
            except (OSError, RuntimeError):  # RuntimeError: a symlink loop (Path.resolve, Python 3.11)
                continue
            found.append((_printable(path.relative_to(root).as_posix()), path))
    return found


def _printable(relative: str) -> str:
    """The name as text: a name that is not UTF-8 (a Latin-1 archive unpacked here) comes out of the
    file system with lone surrogates, which no prompt, log line or Telegram message can carry."""
    return os.fsencode(relative).decode("utf-8", "replace")


def fingerprint(root: Path) -> str:
    """A hash of every file's name, size and modification time: changes when any file does."""
    digest = hashlib.sha256()
    for relative, path in _files(root):
        try:
            stat = path.stat()
        except OSError:
            continue
        digest.update(f"{relative}\x1f{stat.st_size}\x1f{stat.st_mtime_ns}\n".encode("utf-8", "replace"))
        if _racy(stat.st_mtime_ns):  # may change unseen within its tick: the next look reads it again
            digest.update(str(time.time_ns()).encode())
    return digest.hexdigest()[:16]


def _outcome(
    relative: str,
    path: Path,
    parsed: ParsedFiles,
    names: set[str],
    max_file_bytes: int,
    counter: TokenCounter,
    passage_tokens: int,
) -> Parsed:
    """One file's document and passages (parsed again only if changed), or why it is skipped."""
    if path.suffix.lower() not in SUFFIXES:
        reason = f"unsupported type {path.suffix or '(no suffix)'}"
        log.warning("knowledge: skipped %s: %s", relative, reason)
        return reason
    try:
        stat = path.stat()
    except OSError as exc:
        return f"cannot read: {type(exc).__name__}"
    stamp = (stat.st_size, stat.st_mtime_ns, passage_tokens)
    names.add(relative)
    outcome = parsed.get(relative, stamp)
    if outcome is None:
        outcome = _parse(path, relative, max_file_bytes, counter, passage_tokens)
        parsed.put(relative, stamp, outcome)
    return outcome


def read_corpus(
    root: Path,
    *,
    counter: TokenCounter,
    passage_tokens: int,
    max_file_bytes: int,
    parsed: ParsedFiles | None = None,
    progress: ProgressSink = no_progress,
) -> Corpus:
    """Every readable document of ``root`` as passages; unreadable files skipped with their reason.
    ``parsed``: the earlier reads' parses, reused for unchanged files and updated; ``progress`` is told
    after every file."""
    if not root.is_dir():
        reason = "KNOWLEDGE_DIR is not a readable folder"
        log.warning("knowledge: %s: %s", root, reason)
        return Corpus((), (), (SkippedFile(str(root), reason),), "")
    parsed = parsed if parsed is not None else ParsedFiles()
    passages: list[Passage] = []
    documents: list[DocumentInfo] = []
    skipped: list[SkippedFile] = []
    seen: set[str] = set()
    names: set[str] = set()
    files = _files(root)
    for done, (relative, path) in enumerate(files, start=1):
        outcome = _outcome(relative, path, parsed, names, max_file_bytes, counter, passage_tokens)
        if isinstance(outcome, str):
            skipped.append(SkippedFile(relative, outcome))
        else:
            document, cut_all = outcome
            cut = [p for p in cut_all if p.id not in seen]
            seen.update(p.id for p in cut)
            passages.extend(cut)
            info = DocumentInfo(relative, document.title, document.url, len(cut), sum(p.tokens for p in cut))
            documents.append(info)
        progress(IndexProgress("reading", done, len(files), len(passages)))
    parsed.keep(names)
    return Corpus(tuple(passages), tuple(documents), tuple(skipped), fingerprint(root))
