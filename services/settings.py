"""Engine settings, one pydantic-settings class per concern. Values come from the environment or .env."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, PositiveInt, SecretStr, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

# env_ignore_empty: a setting left blank in .env (KEY=) means "use the default"
_CONFIG = SettingsConfigDict(env_file=".env", env_file_encoding="utf-8", extra="ignore", env_ignore_empty=True)


class LLMSettings(BaseSettings):
    model_config = _CONFIG

    openai_api_key: SecretStr = SecretStr("")
    openai_base_url: str | None = None
    openai_model: str = "gpt-4o-mini"
    summary_model: str | None = Field(default=None, description="defaults to OPENAI_MODEL")
    openai_instruction_role: Literal["developer", "system"] = "developer"
    openai_timeout_seconds: float = Field(default=60.0, gt=0)
    openai_max_retries: int = Field(default=2, ge=0)
    openai_http_client: Literal["aiohttp", "httpx"] = Field(
        default="aiohttp",
        description="the openai client's HTTP transport: aiohttp (less CPU per call; benchmarks/RESULTS.md) "
        "or httpx (the SDK's default). aiohttp falls back to httpx on openai versions without it",
    )
    openai_token_limit_param: Literal["max_completion_tokens", "max_tokens"] = "max_completion_tokens"
    openai_temperature: float | None = None
    summary_response_format: Literal["json_schema", "json_object"] = "json_schema"
    max_output_tokens: PositiveInt = 1024
    llm_max_concurrency: PositiveInt = Field(default=64, description="LLM calls at once per process")

    @property
    def effective_summary_model(self) -> str:
        return self.summary_model or self.openai_model


class MemorySettings(BaseSettings):
    model_config = _CONFIG

    chat_input_token_budget: PositiveInt = 6000
    summary_max_tokens: PositiveInt = 800
    history_high_water: float = Field(default=0.3, gt=0, le=1)
    history_low_water: float = Field(default=0.15, gt=0, lt=1)
    history_min_verbatim_turns: int = Field(default=4, ge=0)
    session_ttl_seconds: int = Field(default=30 * 24 * 3600, ge=0, description="0 keeps sessions forever")
    tokenizer_encoding: str = "o200k_base"
    support_company_name: str = "our company"
    max_message_chars: PositiveInt = Field(default=4096, description="longer messages are refused untokenized")
    chat_prompt_version: str | None = None
    summary_prompt_version: str | None = None

    @model_validator(mode="after")
    def _water_marks(self) -> MemorySettings:
        if self.history_low_water >= self.history_high_water:
            raise ValueError("HISTORY_LOW_WATER must be below HISTORY_HIGH_WATER")
        if self.summary_max_tokens >= self.chat_input_token_budget:
            raise ValueError("SUMMARY_MAX_TOKENS must be below CHAT_INPUT_TOKEN_BUDGET")
        return self


class RedisSettings(BaseSettings):
    model_config = _CONFIG

    redis_url: SecretStr | None = Field(default=None, description="unset: in-process store, one process only")
    redis_key_prefix: str = Field(
        default="sb",
        pattern=r"^[^{}]+$",
        description="namespace of every key (no braces: they would change the keys' hash slots)",
    )
    redis_max_connections: int = Field(
        default=512, ge=8, description="connections per Redis server and process; beyond it a command waits"
    )
    redis_cluster: Literal["auto", "on", "off"] = Field(
        default="auto",
        description="auto: ask the server at start-up (INFO cluster); on: Redis Cluster; off: one server",
    )
