"""benchmarks/RESULTS.md stays a record a user reads in minutes, and the code points to it.

The page is at most 15 KB; every raw output it cites is in benchmarks/results/ and every file there is
cited (older runs live in git, not in the tree). Module docstrings of bot/, services/ and benchmarks/
say what and why in a few lines and name the benchmark instead of a section of the page, whose
numbering changes with every rewrite.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
RESULTS = ROOT / "benchmarks" / "RESULTS.md"
RAW = ROOT / "benchmarks" / "results"
CITATION = re.compile(r"(?<![\w/.-])(?:benchmarks/)?results/([\w.-]+)")
SECTION = re.compile(r"RESULTS(?:\.md)?\W{0,6}(?:§|sections?\s+\d)|§\s*\d")
MAX_PAGE_BYTES = 15 * 1024
MAX_MODULE_DOCSTRING = 700


def cited() -> set[str]:
    return set(CITATION.findall(RESULTS.read_text(encoding="utf-8")))


def raw_outputs() -> set[str]:
    return {p.name for p in RAW.iterdir()}


def sources() -> list[Path]:
    return sorted(p for top in ("bot", "services", "benchmarks") for p in (ROOT / top).rglob("*.py"))


def test_the_results_page_is_at_most_15_kb() -> None:
    assert RESULTS.stat().st_size <= MAX_PAGE_BYTES, RESULTS.stat().st_size


def test_every_raw_output_the_page_cites_exists() -> None:
    assert cited(), "the page cites no raw output: the citation pattern is broken"
    assert cited() <= raw_outputs(), sorted(cited() - raw_outputs())


def test_every_raw_output_is_cited_by_the_page() -> None:
    assert raw_outputs() <= cited(), sorted(raw_outputs() - cited())


def test_no_docstring_or_comment_cites_a_section_of_the_results_page() -> None:
    found = []
    for path in sources():
        source = path.read_text(encoding="utf-8")
        texts = [
            (node.body[0].lineno, doc)
            for node in ast.walk(ast.parse(source))
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
            and (doc := ast.get_docstring(node, clean=False))
        ]
        texts += [
            (t.start[0], t.string)
            for t in tokenize.generate_tokens(io.StringIO(source).readline)
            if t.type == tokenize.COMMENT
        ]
        found += [f"{path.relative_to(ROOT)}:{line}" for line, text in texts if SECTION.search(text)]
    assert not found, found


def test_module_docstrings_say_what_and_why_in_a_few_lines() -> None:
    long = {}
    for path in sources():
        doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
        if len(doc) > MAX_MODULE_DOCSTRING:
            long[str(path.relative_to(ROOT))] = len(doc)
    assert not long, long
