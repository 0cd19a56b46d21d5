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
