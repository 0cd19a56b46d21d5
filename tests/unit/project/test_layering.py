"""The architecture rules, checked on the source: services/ knows nothing of Telegram or the bot,
prompts/ knows neither, the pure engine parts do no I/O, and only the Redis backend names redis-py."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


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


IO = ("redis", "openai", "aiohttp", "httpx", "socket", "asyncio", "services.backends", "services.ports")


@pytest.mark.parametrize(
    "module",
    ["services/core/", "services/memory/window.py", "services/memory/policy.py", "services/memory/identifiers.py"],
)
def test_the_pure_parts_do_no_io(module: str) -> None:
    """The leaf package (records, token counting, prompt formatting...) and the window's arithmetic
    are pure code: no network, no event loop, no contract to call."""
    assert [o for o in offenders("services", IO) if o.startswith(module)] == []


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
    assert "services.ports.sessions" in graph["services.memory.compactor"], "the graph resolves imports"
    assert find_cycle(graph) == []


FLOORS: dict[str, set[str]] = {
    "prompts": set(),
    "services.settings": set(),
    "services.core": set(),
    "services.ports": {"services.core"},
    "services.llm": {"services.core"},
    "services.knowledge": {"services.core", "services.ports"},
    "services.memory": {"services.core", "services.ports", "prompts"},
    "services.media": {"services.core", "services.ports", "services.knowledge", "services.llm", "services.settings"},
    "services.actions": {"services.core", "services.ports"},
    "services.backends": {"services.core", "services.ports", "services.knowledge"},
    "services.engine": {
        "services.core",
        "services.ports",
        "services.llm",
        "services.memory",
        "services.knowledge",
        "services.media",
        "services.actions",
        "services.settings",
        "prompts",
    },
}
"""The floors, as folder rules: each folder of services/ (and prompts/) may import only its own
modules and the folders listed. services/core is the leaf (plain data and text helpers: records,
turns, summary state, token counting, prompt formatting, errors, retry policy, media and knowledge
records); the contracts (ports) stand on it alone; the engine is the top floor of services/, and
bot/ (not listed) may import anything of them."""


def folder_of(module: str) -> str:
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] == "services" else parts[0]


def test_every_folder_of_services_has_a_floor() -> None:
    graph = module_graph()
    folders = {folder_of(name) for name in graph if name.startswith("services.")} - {"services"}
    assert folders <= set(FLOORS), f"give {sorted(folders - set(FLOORS))} a floor in FLOORS"


def test_no_module_imports_above_its_floor() -> None:
    graph = module_graph()
    upward = {
        name: sorted(dep for dep in deps if folder_of(dep) not in FLOORS[folder_of(name)] | {folder_of(name)})
        for name, deps in graph.items()
        if folder_of(name) in FLOORS
    }
    assert {name: deps for name, deps in upward.items() if deps} == {}


def test_the_floor_check_catches_an_upward_import() -> None:
    """The check reads folders from module names: a contract importing the engine is above its floor."""
    assert folder_of("services.ports.sessions") == "services.ports"
    assert folder_of("services.engine.chat") not in FLOORS["services.ports"]
    assert folder_of("prompts.summary") == "prompts" and FLOORS["prompts"] == set()
