"""docs/configuration.md is generated from the settings classes: it must be what the generator writes
now, every setting must have a description, and .env.example must have a line for every setting
showing its real default. The checks are also run against settings and files made wrong on purpose."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Literal

import pytest
from pydantic import Field, SecretStr, ValidationError
from pydantic_settings import BaseSettings

from bot.settings import RuntimeSettings
from tools import config_reference as ref

ROOT = Path(__file__).resolve().parents[3]


class ShopSettings(BaseSettings):
    """Settings made up for the tests."""

    shop_name: str = Field(default="our shop", description="shown in replies")
    shop_port: int = Field(default=8080, ge=1, le=65535, description="where it listens")
    shop_ratio: float = Field(default=0.3, gt=0, le=1, description="a fraction")
    shop_key: SecretStr = Field(default=SecretStr(""), description="a secret")
    shop_url: str | None = Field(default=None, description="unset: none")
    shop_mode: Literal["fast", "slow"] = Field(default="fast", description="how")
    shop_on: bool = Field(default=True, description="switch")
    shop_undocumented: int = 3


GOOD_EXAMPLE = """\
# comment
SHOP_NAME=our shop
SHOP_PORT=8080
SHOP_RATIO=0.30
SHOP_KEY=
SHOP_URL=
# SHOP_MODE=fast
SHOP_ON=true
SHOP_UNDOCUMENTED=3
"""


@pytest.fixture(scope="module")
def classes() -> list[type[BaseSettings]]:
    return ref.settings_classes()


def test_the_settings_classes_are_found_in_the_source(classes: list[type[BaseSettings]]) -> None:
    names = [cls.__name__ for cls in classes]
    for expected in ("BotSettings", "WorkerSettings", "LLMSettings", "MemorySettings", "RedisSettings"):
        assert expected in names
    assert len(names) == len(set(names))


def test_the_reference_is_what_the_generator_writes(classes: list[type[BaseSettings]]) -> None:
    written = (ROOT / ref.OUTPUT).read_text(encoding="utf-8")
    assert written == ref.render(classes, ref.compose_variables()), (
        f"{ref.OUTPUT} is out of date: run `.venv/bin/python -m tools.config_reference`"
    )


def test_every_setting_has_a_description(classes: list[type[BaseSettings]]) -> None:
    assert ref.missing_descriptions(classes) == []


def test_env_example_has_every_setting_with_its_default(classes: list[type[BaseSettings]]) -> None:
    example = (ROOT / ".env.example").read_text(encoding="utf-8")
    assert ref.env_example_problems(example, classes, ref.compose_variables()) == []


def test_every_setting_is_in_the_reference(classes: list[type[BaseSettings]]) -> None:
    written = (ROOT / ref.OUTPUT).read_text(encoding="utf-8")
    for cls in classes:
        for setting in ref.settings_of(cls):
            assert f"| `{setting.env}` |" in written


def test_a_missing_description_is_reported() -> None:
    assert ref.missing_descriptions([ShopSettings]) == ["SHOP_UNDOCUMENTED (ShopSettings) has no Field description"]


def test_a_good_env_example_passes() -> None:
    assert ref.env_example_problems(GOOD_EXAMPLE, [ShopSettings], {}) == []


def test_a_setting_missing_from_env_example_is_reported() -> None:
    example = GOOD_EXAMPLE.replace("SHOP_PORT=8080\n", "")
    assert ref.env_example_problems(example, [ShopSettings], {}) == ["SHOP_PORT has no line in .env.example"]


def test_a_wrong_default_in_env_example_is_reported() -> None:
    for wrong in ("SHOP_PORT=8081", "SHOP_RATIO=0.5", "SHOP_ON=false", "SHOP_NAME=their shop"):
        name = wrong.split("=")[0]
        example = "\n".join(wrong if line.startswith(name + "=") else line for line in GOOD_EXAMPLE.splitlines())
        problems = ref.env_example_problems(example, [ShopSettings], {})
        assert len(problems) == 1 and problems[0].startswith(f"{name}: .env.example shows"), problems


def test_a_commented_line_counts_and_is_checked_too() -> None:
    assert ref.env_example_problems(GOOD_EXAMPLE.replace("# SHOP_MODE=fast", "# SHOP_MODE=slow"), [ShopSettings], {})
    assert (
        ref.env_example_problems(GOOD_EXAMPLE.replace("# SHOP_MODE=fast", "SHOP_MODE=fast"), [ShopSettings], {}) == []
    )


def test_a_blank_line_for_a_setting_with_a_default_is_reported() -> None:
    problems = ref.env_example_problems(GOOD_EXAMPLE.replace("SHOP_NAME=our shop", "SHOP_NAME="), [ShopSettings], {})
    assert problems == ["SHOP_NAME: .env.example shows it blank, the default is 'our shop'"]


def test_a_value_that_does_not_parse_is_reported() -> None:
    problems = ref.env_example_problems(GOOD_EXAMPLE.replace("SHOP_PORT=8080", "SHOP_PORT=eighty"), [ShopSettings], {})
    assert len(problems) == 1 and problems[0].startswith("SHOP_PORT: .env.example shows 'eighty'")


def test_compose_variables_are_checked_against_their_compose_default() -> None:
    compose = {"HTTPS_PORT": "8443"}
    assert ref.env_example_problems(GOOD_EXAMPLE + "HTTPS_PORT=8443\n", [ShopSettings], compose) == []
    assert ref.env_example_problems(GOOD_EXAMPLE + "HTTPS_PORT=443\n", [ShopSettings], compose)
    assert ref.env_example_problems(GOOD_EXAMPLE, [ShopSettings], compose) == ["HTTPS_PORT has no line in .env.example"]


def test_compose_variables_are_read_from_docker_compose() -> None:
    found = ref.compose_variables()
    assert found["HTTPS_PORT"] == "8443" and "GRAFANA_ADMIN_PASSWORD" in found


def test_the_rendered_reference_follows_the_settings() -> None:
    page = ref.render([ShopSettings], {"HTTPS_PORT": "8443"})
    assert "| `SHOP_PORT` | integer, 1 to 65535 | `8080` | where it listens |" in page
    assert "| `SHOP_RATIO` | number, > 0 and ≤ 1 | `0.3` | a fraction |" in page
    assert "| `SHOP_URL` | string | unset | unset: none |" in page
    assert "| `SHOP_MODE` | `fast` or `slow` | `fast` | how |" in page
    assert "| `SHOP_ON` | `true` or `false` | `true` | switch |" in page
    assert "| `SHOP_KEY` | secret string | empty | a secret |" in page
    assert "`HTTPS_PORT`" in page

    class MovedShopSettings(ShopSettings):
        """Settings made up for the tests."""

        shop_port: int = Field(default=9090, ge=1, le=65535, description="where it listens")

    # a changed default changes the page, so the up-to-date test above fails until it is regenerated
    moved = ref.render([MovedShopSettings], {})
    assert "| `SHOP_PORT` | integer, 1 to 65535 | `9090` | where it listens |" in moved
    assert moved.replace("MovedShopSettings", "ShopSettings") != ref.render([ShopSettings], {})


def test_check_mode_fails_on_a_stale_page(tmp_path: Path) -> None:
    page = tmp_path / "configuration.md"
    page.write_text("stale\n", encoding="utf-8")
    assert ref.main(["--check", "--output", str(page)]) == 1
    assert ref.main(["--output", str(page)]) == 0
    assert ref.main(["--check", "--output", str(page)]) == 0
    assert page.read_text(encoding="utf-8") == (ROOT / ref.OUTPUT).read_text(encoding="utf-8")


def test_no_module_reads_the_environment_past_the_settings_classes() -> None:
    """A setting read with os.environ or os.getenv would be missing from the generated reference and from
    .env.example: the code reads the environment only through the settings classes."""
    readers = []
    for package in ("bot", "services", "prompts"):
        for path in sorted((ROOT / package).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            for node in ast.walk(tree):
                name = node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else ""
                if name in ("environ", "getenv", "environb", "getenvb"):
                    readers.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not readers, f"read the environment through a settings class instead: {readers}"


def test_the_speed_ups_are_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EVENT_LOOP", "AsyncIO")
    monkeypatch.setenv("GC_FREEZE", "off")
    runtime = RuntimeSettings(_env_file=None)  # type: ignore[call-arg]
    assert (runtime.event_loop, runtime.json_codec, runtime.gc_freeze) == ("asyncio", "auto", False)
    monkeypatch.setenv("JSON_CODEC", "ujson")
    with pytest.raises(ValidationError, match="json_codec"):
        RuntimeSettings(_env_file=None)  # type: ignore[call-arg]
