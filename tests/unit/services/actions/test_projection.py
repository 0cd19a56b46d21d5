"""Only the ``result`` paths of a response reach the model, trimmed and capped, and the line the turn
remembers is short."""

from __future__ import annotations

import json

from services.actions.projection import LINE_CHARS, LIST_ITEMS, NOTE_CHARS, STRING_CHARS, line_of, note_of, project

ORDER = {
    "status": "shipped",
    "eta": "2026-12-06",
    "items": [{"name": "kettle", "sku": "K1"}, {"name": "mug", "sku": "M2"}, {"sku": "no name"}],
    "total": 41.5,
    "card": "4111 1111 1111 1111",
    "history": [[1, 2], [3]],
}


def test_only_the_paths_listed_with_star_over_lists() -> None:
    found = project(ORDER, ["status", "eta", "items.*.name", "total", "missing", "items.1.sku", "history.*.*"])
    assert found == {
        "status": "shipped",
        "eta": "2026-12-06",
        "items.*.name": ["kettle", "mug"],
        "total": 41.5,
        "items.1.sku": "M2",
        "history.*.*": [[1, 2], [3]],
    }
    assert "card" not in json.dumps(found)


def test_a_path_through_the_wrong_shape_is_missing() -> None:
    assert project({"items": "text"}, ["items.*.name", "items.name"]) == {}
    assert project(["a", "b"], ["*", "0"]) == {"*": ["a", "b"], "0": "a"}


def test_values_are_trimmed_and_the_note_capped() -> None:
    found = project({"text": "x" * 10_000, "list": list(range(1000))}, ["text", "list"])
    assert len(found["text"]) == STRING_CHARS + 1 and len(found["list"]) == LIST_ITEMS + 1
    wide = {f"k{i}": "y" * STRING_CHARS for i in range(40)}
    note = note_of(project(wide, list(wide)))
    assert len(note) <= NOTE_CHARS and json.loads(note)["_cut"] == "the rest was too long"


def test_the_line() -> None:
    line = line_of("order_status", {"order_id": "5521"}, "status=shipped, eta=2026-12-06")
    assert line == "order_status order_id=5521: status=shipped, eta=2026-12-06"
    assert len(line_of("t", {"a": "b" * 5000}, "c" * 5000)) == LINE_CHARS
