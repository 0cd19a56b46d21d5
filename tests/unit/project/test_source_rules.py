"""Rules of the source tree, read with ``ast``: one spelling of the item id of an update, no file of
bot/ or services/ over 420 lines, and a dependency's underscore names used only
by a module whose docstring says why (the word "private")."""

from __future__ import annotations

import ast
import functools
import importlib
import inspect
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
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


PACKAGES = ("bot", "services")
MAX_LINES = 420
"""No file of bot/ or services/ is longer, without exceptions: a file that grows past it holds more than
one job and is split by job (issue 27)."""


def package_sources() -> list[Path]:
    return sorted(path for folder in PACKAGES for path in (ROOT / folder).rglob("*.py"))


def test_no_file_of_bot_or_services_is_over_420_lines() -> None:
    sources = package_sources()
    assert any(path.name == "worker.py" for path in sources), "the scan sees the packages"
    long = {
        path.relative_to(ROOT).as_posix(): lines
        for path in sources
        if (lines := len(path.read_text().splitlines())) > MAX_LINES
    }
    assert long == {}


MAX_FUNCTION_LINES = 60
"""A function longer than this (docstring included) does more than one job: split it (McCabe's
complexity is checked by ruff, C901 at 10, in the test command)."""


def test_no_function_of_bot_or_services_is_over_60_lines() -> None:
    long = {
        f"{path.relative_to(ROOT).as_posix()}:{node.name}": node.end_lineno - node.lineno + 1
        for path in package_sources()
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.end_lineno is not None
        and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES
    }
    assert long == {}


_PLAIN_BASES = {"object", "Exception", "ValueError", "RuntimeError", "Protocol", "Generic", "ABC", "NamedTuple"}
"""Bases that give a class no private attributes of a dependency's to write into."""


def _dotted(node: ast.expr) -> str:
    while isinstance(node, ast.Subscript):  # Generic[T], Protocol[T]
        node = node.value
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    return node.id if isinstance(node, ast.Name) else ""


def _imported(tree: ast.Module) -> dict[str, str]:
    """Local name → what it names, ``module:attribute`` or a module, by the module's imports."""
    names: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names |= {alias.asname or alias.name: f"{node.module}:{alias.name}" for alias in node.names}
        elif isinstance(node, ast.Import):
            names |= {(alias.asname or alias.name).split(".")[0]: alias.name.split(".")[0] for alias in node.names}
    return names


def _dependency_class(base: str, imported: dict[str, str]) -> type | None:
    head, _, rest = base.partition(".")
    target = imported.get(head)
    if target is None or target.startswith((*PACKAGES, "prompts")):
        return None
    module_name, _, attribute = target.partition(":")
    value: object = importlib.import_module(module_name)
    for part in [part for part in (attribute, *rest.split(".")) if part]:
        value = getattr(value, part)
    return value if isinstance(value, type) else None


@functools.cache
def _class_source(cls: type) -> str:
    """The source of a dependency class ("" for a built-in one); read once (it is slow)."""
    try:
        return inspect.getsource(cls)
    except (OSError, TypeError):  # a built-in class
        return ""


def _used_by(classes: list[type], name: str) -> bool:
    """Whether ``name`` occurs in the source of these dependency classes or of their bases."""
    for cls in {klass for top in classes for klass in top.__mro__}:
        if re.search(rf"\b{re.escape(name)}\b", _class_source(cls)):
            return True
    return False


def underscore_names_defined(trees: list[ast.Module]) -> set[str]:
    """Every ``_name`` these modules define: functions, classes, variables, arguments, and attributes
    stored on ``self``/``cls`` in their classes. Not their own: an attribute stored on another object
    (``session._request_class = ...``), or on a subclass of a dependency's class when that class uses
    the name (``self._connector_type = ...`` in a subclass of aiogram's session)."""
    classes = {node.name for tree in trees for node in ast.walk(tree) if isinstance(node, ast.ClassDef)}
    names: set[str] = set()
    for tree in trees:
        imported = _imported(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                names.add(node.name)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
            elif isinstance(node, ast.arg):
                names.add(node.arg)
            if not isinstance(node, ast.ClassDef):
                continue
            bases = [_dotted(base) for base in node.bases]
            foreign = [
                found
                for base in bases
                if base not in classes | _PLAIN_BASES and (found := _dependency_class(base, imported)) is not None
            ]
            names |= {
                inner.attr
                for inner in ast.walk(node)
                if isinstance(inner, ast.Attribute)
                and isinstance(inner.ctx, ast.Store)
                and isinstance(inner.value, ast.Name)
                and inner.value.id in ("self", "cls")
                and not _used_by(foreign, inner.attr)
            }
    return {name for name in names if name.startswith("_")}


def own_underscore_names() -> set[str]:
    """Every ``_name`` the project itself defines (see underscore_names_defined)."""
    paths = sorted(path for folder in (*PACKAGES, "prompts") for path in (ROOT / folder).rglob("*.py"))
    return underscore_names_defined([ast.parse(path.read_text(), filename=str(path)) for path in paths])


def is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def dependency_privates(tree: ast.Module, own: set[str]) -> list[str]:
    """Underscore names of other packages this module uses: imported (``from redis.x import _y``,
    ``import a._b``) or read as attributes that the project never defines (``pool._in_use``)."""
    used: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if not node.module.startswith((*PACKAGES, "prompts")):
                parts = node.module.split(".") + [alias.name for alias in node.names]
                used += [part for part in parts if is_private(part)]
        elif isinstance(node, ast.Import):
            used += [alias.name for alias in node.names if any(is_private(p) for p in alias.name.split("."))]
        elif isinstance(node, ast.Attribute) and is_private(node.attr) and node.attr not in own:
            used.append(f"{node.attr} (line {node.lineno})")
    return used


def says_why(tree: ast.Module) -> bool:
    """The module's docstring names its use of a dependency's private names (the word "private")."""
    docstring = ast.get_docstring(tree) or ""
    return "private" in docstring.lower()


def test_no_use_of_a_dependencys_underscore_names_outside_a_module_that_says_why() -> None:
    own = own_underscore_names()
    found = {}
    for path in package_sources():
        tree = ast.parse(path.read_text(), filename=str(path))
        if (used := dependency_privates(tree, own)) and not says_why(tree):
            found[path.relative_to(ROOT).as_posix()] = used
    assert found == {}


def test_the_private_name_check_sees_one() -> None:
    tree = ast.parse("from redis.asyncio.connection import _Helper\nimport x\nx.pool._in_use_connections\n")
    assert dependency_privates(tree, set()) == ["_Helper", "_in_use_connections (line 3)"]
    assert dependency_privates(tree, {"_in_use_connections"}) == ["_Helper"]


def test_a_dependency_s_attribute_written_on_its_subclass_is_not_the_project_s_own() -> None:
    source = (
        "from aiogram.client.session.aiohttp import AiohttpSession\n"
        "class Mine:\n    def __init__(self):\n        self._mine = 1\n"
        "class Sub(AiohttpSession):\n    def __init__(self):\n        self._connector_type = self._new = 1\n"
        "class SubOfMine(Mine):\n    def go(self, session):\n        self._also_mine = 2\n"
        "        session._request_class = 3\n"
    )
    tree = ast.parse(source)
    assert set(filter(is_private, underscore_names_defined([tree]))) == {"_mine", "_new", "_also_mine"}
    assert dependency_privates(tree, underscore_names_defined([tree])) == [
        "_connector_type (line 7)",
        "_request_class (line 11)",
    ]
