import pytest
from pydantic import ValidationError

from services.settings import KnowledgeSettings, LLMSettings, MemorySettings, RedisSettings


def test_budget_must_be_positive(monkeypatch: pytest.MonkeyPatch) -> None:
    for bad in ("0", "-5", "abc"):
        monkeypatch.setenv("CHAT_INPUT_TOKEN_BUDGET", bad)
        with pytest.raises(ValidationError, match="chat_input_token_budget"):
            MemorySettings(_env_file=None)


def test_defaults_and_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CHAT_INPUT_TOKEN_BUDGET", "9000")
    monkeypatch.setenv("OPENAI_MODEL", "gpt-4.1-mini")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret")
    memory = MemorySettings(_env_file=None)
    llm = LLMSettings(_env_file=None)
    assert memory.chat_input_token_budget == 9000 and memory.history_low_water == 0.15
    assert llm.effective_summary_model == "gpt-4.1-mini"
    assert "sk-secret" not in repr(llm)
    monkeypatch.setenv("SUMMARY_MODEL", "cheap")
    assert LLMSettings(_env_file=None).effective_summary_model == "cheap"


def test_water_marks_are_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HISTORY_LOW_WATER", "0.9")
    with pytest.raises(ValidationError, match="HISTORY_LOW_WATER"):
        MemorySettings(_env_file=None)


def test_blank_redis_url_means_in_process(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REDIS_URL", "")
    assert RedisSettings(_env_file=None).redis_url is None


def test_env_example_documents_every_setting_and_loads(monkeypatch: pytest.MonkeyPatch) -> None:
    from pathlib import Path

    from bot.settings import BotSettings, WorkerSettings

    example = Path(__file__).resolve().parents[3] / ".env.example"
    names = {line.split("=", 1)[0] for line in example.read_text().splitlines() if line and not line.startswith("#")}
    for settings_class in (BotSettings, WorkerSettings, LLMSettings, MemorySettings, RedisSettings):
        for field in settings_class.model_fields:
            assert field.upper() in names, f"{field.upper()} missing from .env.example"
    for line in example.read_text().splitlines():
        if line and not line.startswith("#"):
            key, value = line.split("=", 1)
            monkeypatch.setenv(key, value)
    assert MemorySettings(_env_file=None).chat_input_token_budget == 6000
    assert BotSettings(_env_file=None).bot_mode == "polling"
    assert LLMSettings(_env_file=None).openai_base_url is None


def test_static_knowledge_must_fit_the_knowledge_room(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KNOWLEDGE_TOKEN_BUDGET", "1000")
    monkeypatch.setenv("KNOWLEDGE_STATIC_TOKENS", "1200")
    with pytest.raises(ValidationError, match="KNOWLEDGE_STATIC_TOKENS=1200 is more than KNOWLEDGE_TOKEN_BUDGET=1000"):
        KnowledgeSettings(_env_file=None)  # type: ignore[call-arg]
    monkeypatch.setenv("KNOWLEDGE_STATIC_TOKENS", "1000")
    assert KnowledgeSettings(_env_file=None).knowledge_static_tokens == 1000  # type: ignore[call-arg]
