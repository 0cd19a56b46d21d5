"""The documentation holds together as plain Markdown on GitHub: every relative link of README.md,
CHANGELOG.md and docs/*.md names a file that exists (and a heading that exists, for #anchors), the
mkdocs nav lists every page, and the README stays a front door (small, with the two commands)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[3]
README_LIMIT_BYTES = 12 * 1024

_FENCE = re.compile(r"^(```|~~~).*?^\1[ \t]*$", re.MULTILINE | re.DOTALL)
_CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1", re.DOTALL)
_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_HEADING = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.+?)[ \t#]*$", re.MULTILINE)


def pages() -> list[Path]:
    return [ROOT / "README.md", ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").glob("*.md"))]


def without_code(markdown: str) -> str:
    return _CODE_SPAN.sub("", _FENCE.sub("", markdown))


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: markup dropped, lower case, punctuation removed, spaces to hyphens."""
    text = re.sub(r"`([^`]*)`", r"\1", heading)
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = re.sub(r"[*_]{1,3}([^*_]+)[*_]{1,3}", r"\1", text)
    text = text.strip().lower()
    text = "".join(ch for ch in text if ch.isalnum() or ch in " -_")
    return text.replace(" ", "-")


def anchors(markdown: str) -> set[str]:
    found: set[str] = set()
    counts: dict[str, int] = {}
    for match in _HEADING.finditer(_FENCE.sub("", markdown)):
        base = slug(match.group(2))
        n = counts.get(base, 0)
        counts[base] = n + 1
        found.add(base if n == 0 else f"{base}-{n}")
    return found


def broken_links(page: Path, root: Path = ROOT) -> list[str]:
    """Relative links of ``page`` whose file, or whose #anchor in a Markdown file, does not exist."""
    problems: list[str] = []
    for target in _LINK.findall(without_code(page.read_text(encoding="utf-8"))):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.IGNORECASE):
            continue  # https:, mailto: ...
        path_part, _, anchor = target.partition("#")
        resolved = (page.parent / path_part).resolve() if path_part else page
        where = f"{page.relative_to(root)}: {target}"
        if root.resolve() not in resolved.parents and resolved != root.resolve():
            problems.append(f"{where} leaves the repository")
        elif not resolved.exists():
            problems.append(f"{where}: no such file")
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved.read_text(encoding="utf-8")):
            problems.append(f"{where}: no heading with that anchor")
    return problems


def test_the_checker_reads_links_and_headings(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "other.md").write_text("# Other\n\n## Redis Cluster (3 masters)\n\n## `set-webhook`\n")
    page = tmp_path / "docs" / "page.md"
    page.write_text(
        "# Page\n\n## Same\n\n## Same\n\n"
        "[ok](other.md#redis-cluster-3-masters) [ok](other.md#set-webhook) [ok](#same-1) [ok](../docs/other.md)\n"
        "[web](https://example.com/x.md) ![img](other.md)\n"
        "[gone](missing.md) [bad anchor](other.md#nope) [self](#nowhere) [up](../../outside.md)\n"
        "`[in code](nothing.md)`\n\n```\n[in a block](nothing.md)\n```\n"
    )
    assert broken_links(page, tmp_path) == [
        "docs/page.md: missing.md: no such file",
        "docs/page.md: other.md#nope: no heading with that anchor",
        "docs/page.md: #nowhere: no heading with that anchor",
        "docs/page.md: ../../outside.md leaves the repository",
    ]


@pytest.mark.parametrize("page", pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page: Path) -> None:
    assert page.exists()
    assert broken_links(page) == []


def test_the_mkdocs_nav_lists_every_page_once() -> None:
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))

    def entries(node: object) -> list[str]:
        if isinstance(node, str):
            return [node]
        if isinstance(node, list):
            return [e for item in node for e in entries(item)]
        if isinstance(node, dict):
            return [e for value in node.values() for e in entries(value)]
        return []

    listed = entries(config["nav"])
    assert [section for item in config["nav"] for section in item][:3] == [
        "Getting started",
        "Developer guide",
        "Operations",
    ]
    assert sorted(listed) == sorted(p.name for p in (ROOT / "docs").glob("*.md"))


def test_the_readme_is_a_front_door() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.encode("utf-8")) <= README_LIMIT_BYTES
    blocks = [block.strip() for block in re.findall(r"^```bash\n(.*?)^```", readme, re.MULTILINE | re.DOTALL)]
    assert "./scripts/run" in blocks and "./scripts/test" in blocks
    assert "docs/configuration.md" in readme


def test_every_metric_is_documented() -> None:
    defined = set(re.findall(r"\"(sb_[a-z_]+)\"", (ROOT / "bot/metrics.py").read_text(encoding="utf-8")))
    documented = (ROOT / "docs/operations.md").read_text(encoding="utf-8")
    assert len(defined) > 20, "the scan reads the metric names"
    assert sorted(name for name in defined if f"`{name}" not in documented) == []


def alert_rules() -> str:
    page = (ROOT / "docs/operations.md").read_text(encoding="utf-8")
    section = page.split("## Alerts", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"^```yaml\n(.*?)^```", section, re.MULTILINE | re.DOTALL)
    assert len(blocks) == 1
    return str(blocks[0])


def test_the_suggested_alerts_name_real_metrics() -> None:
    defined = set(re.findall(r"\"(sb_[a-z_]+)\"", (ROOT / "bot/metrics.py").read_text(encoding="utf-8")))
    used = {re.sub(r"_(bucket|sum|count)$", "", name) for name in re.findall(r"\bsb_[a-z_]+", alert_rules())}
    assert used and used <= defined


@pytest.mark.slow  # starts promtool
@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool comes with Debian's prometheus package")
def test_promtool_accepts_the_suggested_alerts(tmp_path: Path) -> None:
    rules = tmp_path / "rules.yml"
    rules.write_text(alert_rules(), encoding="utf-8")
    checked = subprocess.run(["promtool", "check", "rules", str(rules)], capture_output=True, text=True, timeout=60)
    assert checked.returncode == 0, checked.stdout + checked.stderr


def architecture_tree() -> str:
    """The code block under "## The tree" in docs/architecture.md."""
    page = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    return page.split("## The tree", 1)[1].split("```")[1]


def test_the_architecture_tree_names_every_module() -> None:
    """Every module of bot/ and services/ is named in the tree by its file name (``worker.py`` or,
    in a list of one package's modules, ``worker``)."""
    tree = architecture_tree()
    unnamed = [
        path.relative_to(ROOT).as_posix()
        for package in ("bot", "services")
        for path in sorted((ROOT / package).rglob("*.py"))
        if path.name != "__init__.py" and not re.search(rf"\b{re.escape(path.stem)}(\.py)?\b", tree)
    ]
    assert unnamed == [], "add them to docs/architecture.md's tree"
