"""The architecture rules, checked on the source: services/ knows nothing of Telegram or the bot,
prompts/ knows neither, the pure engine parts do no I/O, and only the Redis backend names redis-py."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def imports_of(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return found


def modules_under(folder: str) -> list[Path]:
    return sorted((ROOT / folder).rglob("*.py"))


def offenders(folder: str, forbidden: tuple[str, ...], *, skip: str = "") -> list[str]:
    return [
        f"{path.relative_to(ROOT)}: {name}"
        for path in modules_under(folder)
        if not (skip and skip in path.as_posix())
        for name in sorted(imports_of(path))
        if any(name == f or name.startswith(f + ".") for f in forbidden)
    ]


def test_the_checks_see_the_modules() -> None:
    assert len(modules_under("services")) > 20 and len(modules_under("bot")) > 20
    assert "aiogram" in imports_of(ROOT / "bot/factory.py"), "the scan reads imports"


def test_services_never_import_the_bot_or_aiogram() -> None:
    assert offenders("services", ("bot", "aiogram")) == []


def test_prompts_import_neither_services_nor_the_bot() -> None:
    assert offenders("prompts", ("bot", "services", "aiogram")) == []


def test_only_the_redis_backend_names_redis_py() -> None:
    assert offenders("services", ("redis",), skip="services/backends/redis/") == []
    assert offenders("bot", ("redis",)) == []


@pytest.mark.parametrize("module", ["window", "tokens", "policy", "summary_state", "identifiers", "prompt_format"])
def test_the_pure_engine_parts_do_no_io(module: str) -> None:
    io = ("redis", "openai", "aiohttp", "httpx", "socket", "asyncio", "services.backends", "services.ports")
    assert [o for o in offenders("services/engine", io) if o.startswith(f"services/engine/{module}.py:")] == []


LEAF_DATA = {
    "services.errors",
    "services.fence",
    "services.engine.models",
    "services.engine.turns",
    "services.engine.summary_state",
    "services.engine.handoff_records",
    "services.ports.knowledge",
}
"""Modules of plain data (records, errors, the fence) that import nothing of the project but each other."""

PROJECT = ("bot", "services", "prompts")


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def project_imports(path: Path, known: set[str]) -> set[str]:
    """The project modules ``path`` imports, every import counted (``TYPE_CHECKING`` ones too); a
    relative import is resolved."""
    here = module_name(path).split(".")
    package = here if path.name == "__init__.py" else here[:-1]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package[: len(package) - node.level + 1] + ([base] if base else []))
            # ``from package import module`` depends on the module (the package's own import is
            # implied by every submodule and not counted); ``from module import name`` on the module
            subs = [f"{base}.{alias.name}" for alias in node.names if f"{base}.{alias.name}" in known]
            names = subs if len(subs) == len(node.names) else [base, *subs]
        else:
            continue
        found.update(name for name in names if name in known)
    return found


def module_graph() -> dict[str, set[str]]:
    paths = [path for folder in PROJECT for path in modules_under(folder)]
    known = {module_name(path) for path in paths}
    return {module_name(path): project_imports(path, known) - {module_name(path)} for path in paths}


def find_cycle(graph: dict[str, set[str]]) -> list[str]:
    """One import cycle of ``graph`` (as the list of modules around it), or [] (depth-first search)."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str]:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt) :], nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        stack.pop()
        state[node] = 2
        return []

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return []


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) == []


def test_no_import_cycle_in_bot_services_prompts() -> None:
    graph = module_graph()
    assert "services.ports.sessions" in graph["services.engine.compactor"], "the graph resolves imports"
    assert find_cycle(graph) == []


def test_leaf_data_modules_import_only_each_other() -> None:
    graph = module_graph()
    assert {name: graph[name] - LEAF_DATA for name in LEAF_DATA if graph[name] - LEAF_DATA} == {}


def test_contracts_import_only_leaf_data_modules() -> None:
    """services/ports/*: each contract builds on data alone (and on other contracts: the backend
    contract gathers them), never on the engine's machinery or a backend."""
    graph = module_graph()
    contracts = [name for name in graph if name.startswith("services.ports.")]
    assert len(contracts) >= 6
    wrong = {
        name: sorted(dep for dep in graph[name] if dep not in LEAF_DATA and not dep.startswith("services.ports"))
        for name in contracts
    }
    assert {name: deps for name, deps in wrong.items() if deps} == {}
