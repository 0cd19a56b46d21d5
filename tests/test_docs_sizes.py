"""benchmarks/RESULTS.md stays a record a user reads in minutes.

The page is at most 15 KB; every raw output it cites is in benchmarks/results/ and every file there is
cited (older runs live in git, not in the tree).
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "RESULTS.md"
RAW = ROOT / "benchmarks" / "results"
CITATION = re.compile(r"(?<![\w/.-])(?:benchmarks/)?results/([\w.-]+)")
MAX_PAGE_BYTES = 15 * 1024


def cited() -> set[str]:
    return set(CITATION.findall(RESULTS.read_text(encoding="utf-8")))


def raw_outputs() -> set[str]:
    return {p.name for p in RAW.iterdir()}


def test_the_results_page_is_at_most_15_kb() -> None:
    assert RESULTS.stat().st_size <= MAX_PAGE_BYTES, RESULTS.stat().st_size


def test_every_raw_output_the_page_cites_exists() -> None:
    assert cited(), "the page cites no raw output: the citation pattern is broken"
    assert cited() <= raw_outputs(), sorted(cited() - raw_outputs())


def test_every_raw_output_is_cited_by_the_page() -> None:
    assert raw_outputs() <= cited(), sorted(raw_outputs() - cited())
