"""Rules of the source tree, read with ``ast``: one spelling of the item id of an update."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = ("bot", "services", "benchmarks", "eval", "tools")
SOURCES = sorted(path for folder in FOLDERS for path in (ROOT / folder).rglob("*.py"))


def item_ids_built(tree: ast.AST) -> list[int]:
    """Lines of ``f"u{...}"`` in ``tree``."""
    return [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.JoinedStr)
        and len(node.values) == 2
        and isinstance(node.values[0], ast.Constant)
        and node.values[0].value == "u"
    ]


def test_the_item_id_of_an_update_is_built_in_one_place() -> None:
    """``f"u{update_id}"`` only in ``services.ports.queue.item_id_of``."""
    found = {
        f"{path.relative_to(ROOT)}:{line}"
        for path in SOURCES
        for line in item_ids_built(ast.parse(path.read_text(), filename=str(path)))
    }
    assert len(found) >= 1, "the scan sees the helper"
    helper = next(
        node
        for node in ast.parse((ROOT / "services/ports/queue.py").read_text()).body
        if isinstance(node, ast.FunctionDef) and node.name == "item_id_of"
    )
    assert sorted(found) == [f"services/ports/queue.py:{line}" for line in item_ids_built(helper)]
