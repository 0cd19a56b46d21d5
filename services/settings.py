"""Engine settings, one pydantic-settings class per concern. Values come from the environment or .env."""

from __future__ import annotations

from typing import Literal
from urllib.parse import urlsplit

from pydantic import Field, PositiveInt, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

# env_ignore_empty: a setting left blank in .env (KEY=) means "use the default"
_CONFIG = SettingsConfigDict(env_file=".env", env_file_encoding="utf-8", extra="ignore", env_ignore_empty=True)


def http_url(value: str | None, *, example: str) -> str | None:
    """``value`` when it is an http(s) URL with a host; else a ValueError whose message (the fix) holds
    no part of the value (a URL may carry a password)."""
    if value is None:
        return None
    try:
        parts = urlsplit(value.strip())
        host = parts.hostname
    except ValueError:
        host = None
    else:
        if parts.scheme not in ("http", "https"):
            host = None
    if not host:
        raise ValueError(f"is not an http:// or https:// URL with a host: write it in full, e.g. {example}")
    return value.strip()


class LLMSettings(BaseSettings):
    """The language model: any OpenAI-compatible endpoint, its models, and how calls are made."""

    model_config = _CONFIG

    openai_api_key: SecretStr = Field(
        default=SecretStr(""),
        description="the provider's API key, checked once at start (GET /models): a key refused with 401 stops the "
        "start. For a local server that needs none, any non-empty value",
    )
    openai_base_url: str | None = Field(
        default=None,
        description="the OpenAI-compatible endpoint, e.g. http://localhost:8000/v1 (vLLM, Ollama, LiteLLM); "
        "unset: api.openai.com",
    )
    openai_model: str = Field(default="gpt-4o-mini", description="the chat model")
    summary_model: str | None = Field(
        default=None,
        description="the model that folds old turns into the summary; unset: OPENAI_MODEL (a cheaper one is "
        "usually fine)",
    )
    openai_instruction_role: Literal["auto", "developer", "system"] = Field(
        default="auto",
        description="role of the instruction message: auto (developer on OpenAI's API, i.e. OPENAI_BASE_URL unset "
        "or host api.openai.com; system on any other server; switched once, logged, when the endpoint refuses "
        "the role in use), developer, or system",
    )
    openai_timeout_seconds: float = Field(default=60.0, gt=0, description="timeout of one model request, seconds")
    openai_max_retries: int = Field(
        default=2,
        ge=0,
        description="retries within one model call of 429, 5xx, timeouts and incomplete answers, by the bot's "
        "policy (the openai client's own retries are off): backoff with jitter, never sooner than the "
        "provider's Retry-After",
    )
    llm_retry_base_seconds: float = Field(
        default=1.0, gt=0, description="first backoff step of a model retry, seconds (doubles per retry, equal jitter)"
    )
    llm_retry_max_seconds: float = Field(
        default=120.0, gt=0, description="largest backoff step of a model retry, seconds"
    )
    llm_retry_in_call_max_wait_seconds: float = Field(
        default=10.0,
        ge=0,
        description="longest wait slept inside one model call (a longer Retry-After or backoff ends the call: the "
        "customer is told, or the queue worker retries the question later)",
    )
    openai_http_client: Literal["aiohttp", "httpx"] = Field(
        default="aiohttp",
        description="the openai client's HTTP transport: aiohttp (less CPU per call; benchmarks/RESULTS.md) "
        "or httpx (the SDK's default). aiohttp falls back to httpx on openai versions without it",
    )
    openai_token_limit_param: Literal["auto", "max_completion_tokens", "max_tokens"] = Field(
        default="auto",
        description="how the reply cap is sent: auto (max_completion_tokens on OpenAI's API; max_tokens on any "
        "other server, which some ignore max_completion_tokens from; switched once, logged, when the endpoint "
        "refuses the one in use), max_completion_tokens, or max_tokens",
    )
    openai_prompt_cache_key: Literal["auto", "on", "off"] = Field(
        default="auto",
        description="send each chat's prompt_cache_key (a keyed hash of the chat, never its id) so the provider "
        "routes a chat's prompts to the cache that holds its prefix: on, off, or auto (only to api.openai.com, "
        "as OPENAI_BASE_URL unset; other servers may refuse a field they do not know)",
    )
    openai_temperature: float | None = Field(
        default=None, description="sampling temperature; unset: the provider's default"
    )
    summary_response_format: Literal["auto", "json_schema", "json_object", "plain"] = Field(
        default="auto",
        description="summary calls: auto (try json_schema, then json_object, then plain instructions, on an HTTP "
        "error naming response_format or a reply that is not JSON; remembered per process), or one of "
        "json_schema (strict structured output), json_object, plain (no response_format: the JSON is asked "
        "for and read out of the reply)",
    )
    max_output_tokens: PositiveInt = Field(
        default=1024, description="most tokens of one reply; a reply cut by it is not stored, the customer is told"
    )
    llm_max_concurrency: PositiveInt = Field(
        default=64,
        description="LLM calls at once per process (the rest wait); with REDIS_URL keep it at least "
        "WORKER_CONCURRENCY: each chat a worker serves makes one call at a time",
    )
    llm_probe_interval_seconds: float = Field(
        default=30.0,
        gt=0,
        description="while the provider refuses the bot (key, model, quota), a 1-token request of the refused "
        "model is sent this often; once one is accepted the refusal (metric, /readyz) clears without customer traffic",
    )

    @field_validator("openai_base_url")
    @classmethod
    def _base_url(cls, value: str | None) -> str | None:
        return http_url(value, example="http://localhost:8000/v1, or unset it for api.openai.com")

    @property
    def effective_summary_model(self) -> str:
        return self.summary_model or self.openai_model

    @property
    def sends_prompt_cache_key(self) -> bool:
        if self.openai_prompt_cache_key != "auto":
            return self.openai_prompt_cache_key == "on"
        base = (self.openai_base_url or "https://api.openai.com/v1").strip().lower()
        return base.startswith("https://api.openai.com/")


class MemorySettings(BaseSettings):
    """Conversation memory: the token budget of every prompt, compaction into the summary, retention."""

    model_config = _CONFIG

    chat_input_token_budget: PositiveInt = Field(
        default=6000,
        description="input tokens of every chat prompt: instruction + summary + recent turns + the new message",
    )
    summary_max_tokens: PositiveInt = Field(
        default=800,
        description="cap of the running summary (tokens as sent): a bigger one is re-compressed, never cut; "
        "below CHAT_INPUT_TOKEN_BUDGET",
    )
    history_high_water: float = Field(
        default=0.3,
        gt=0,
        le=1,
        description="after a reply, compact once the stored history passes this fraction of the history room "
        "(budget - instruction - summary cap)",
    )
    history_low_water: float = Field(
        default=0.15,
        gt=0,
        lt=1,
        description="compaction folds the oldest turns until the history is under this fraction of the history "
        "room; below HISTORY_HIGH_WATER",
    )
    history_min_verbatim_turns: int = Field(
        default=4, ge=0, description="newest turns compaction keeps verbatim (as long as they fit)"
    )
    session_ttl_seconds: int = Field(
        default=30 * 24 * 3600,
        ge=0,
        description="every key of a chat expires this long after its last activity (default 30 days); 0 = never",
    )
    tokenizer_encoding: str = Field(
        default="o200k_base",
        description="the tokenizer prompts are counted with; its file ships with the bot (no download). Bundled: "
        "o200k_base",
    )
    support_company_name: str = Field(default="our company", description="company name in the support instruction")
    max_message_chars: PositiveInt = Field(
        default=4096, description="longer customer messages are refused with the limit before any tokenization"
    )
    chat_prompt_version: str | None = Field(
        default=None, description="pin the chat prompt's version (e.g. v1); unset: the active version in prompts/"
    )
    summary_prompt_version: str | None = Field(
        default=None, description="pin the summary prompt's version; unset: the active version in prompts/"
    )
    summary_breaker_failures: PositiveInt = Field(
        default=3,
        description="summaries failed in a row that pause summary calls (a circuit breaker: not one try per "
        "turn); meanwhile turns forced out of the prompt are folded by their identifiers",
    )
    summary_breaker_cooldown_seconds: float = Field(
        default=300.0,
        gt=0,
        description="how long summary calls pause before one trial call decides whether they resume",
    )

    @model_validator(mode="after")
    def _water_marks(self) -> MemorySettings:
        problems = []
        if self.history_low_water >= self.history_high_water:
            problems.append(
                f"HISTORY_LOW_WATER={self.history_low_water} must be below HISTORY_HIGH_WATER="
                f"{self.history_high_water}: lower the one or raise the other (defaults 0.15 and 0.3)"
            )
        if self.summary_max_tokens >= self.chat_input_token_budget:
            problems.append(
                f"SUMMARY_MAX_TOKENS={self.summary_max_tokens} must be below CHAT_INPUT_TOKEN_BUDGET="
                f"{self.chat_input_token_budget}: raise CHAT_INPUT_TOKEN_BUDGET (default 6000) or lower "
                "SUMMARY_MAX_TOKENS (default 800)"
            )
        if problems:
            raise ValueError("\n".join(problems))
        return self


KNOWLEDGE_BLOCK_TOKENS = 120
"""What a passage's <knowledge> block adds at most: tags, ref and its source (capped: SOURCE_PART_CHARS)."""


class KnowledgeSettings(BaseSettings):
    """Answers grounded in the operator's documents: which folder, how passages are cut, how much of every
    prompt they may take, and the optional embeddings for hybrid retrieval."""

    model_config = _CONFIG

    knowledge_dir: str | None = Field(
        default=None,
        description="folder (subfolders included) of Markdown, text, HTML and PDF documents the bot answers from; "
        "unset: no knowledge, nothing changes",
    )
    knowledge_passage_tokens: int = Field(
        default=220, ge=32, le=2000, description="largest passage cut from a document (o200k tokens)"
    )
    knowledge_token_budget: int = Field(
        default=1500,
        ge=64,
        description="room inside CHAT_INPUT_TOKEN_BUDGET for retrieved passages, filled with whole passages in "
        "rank order (at least 64: the no-knowledge note needs room too); start-up refuses settings that leave no room "
        "for history",
    )
    knowledge_static_tokens: int = Field(
        default=0,
        ge=0,
        description="when all the documents, as knowledge blocks, fit this many tokens, they are sent whole, once, "
        "right after the instruction (cached with it) instead of retrieved per turn; at most "
        "KNOWLEDGE_TOKEN_BUDGET; 0: off",
    )
    knowledge_top_k: PositiveInt = Field(default=6, description="most passages one turn may carry")
    knowledge_min_score: float = Field(
        default=0.1,
        ge=0,
        le=1,
        description="relevance floor (0..1, the share of the question's content words a passage holds, each "
        "weighed by its rarity in the documents, a word they never use 3 times the rarest): below it no passage "
        "is sent and the model says the documents do not cover the question (chosen on the Debian FAQ, confirmed "
        "on the man pages: benchmarks/knowledge.py)",
    )
    knowledge_refresh_seconds: float = Field(
        default=15.0,
        gt=0,
        le=60,
        description="how often every worker looks for added, changed or removed files (changes reach all workers "
        "within this time plus the rebuild)",
    )
    knowledge_max_file_bytes: PositiveInt = Field(
        default=20 * 1024 * 1024, description="larger files are skipped with a log line"
    )
    embedding_model: str | None = Field(
        default=None,
        description="embedding model on the same OpenAI-compatible endpoint (POST /embeddings), e.g. "
        "text-embedding-3-small: hybrid retrieval (full-text + vectors, fused by reciprocal rank); unset: "
        "full-text only",
    )
    embedding_min_similarity: float = Field(
        default=0.45,
        ge=-1,
        le=1,
        description="with EMBEDDING_MODEL: a passage this similar to the question (cosine) clears the floor even "
        "when it shares few words with it (a paraphrase)",
    )
    embedding_batch_size: int = Field(default=64, ge=1, le=2048, description="passages per /embeddings request")
    embedding_timeout_seconds: float = Field(
        default=5.0,
        gt=0,
        description="a query embedding slower than this is given up for the turn (full-text only, logged and counted)",
    )
    knowledge_cache_dir: str = Field(
        default=".cache/embeddings",
        description="the in-process store's embedding cache (with REDIS_URL the cache is in Redis, shared by all "
        "workers)",
    )

    @model_validator(mode="after")
    def _passages_fit_the_budget(self) -> KnowledgeSettings:
        problems = []
        room = self.knowledge_token_budget - KNOWLEDGE_BLOCK_TOKENS
        if self.knowledge_passage_tokens > room:
            problems.append(
                f"KNOWLEDGE_PASSAGE_TOKENS={self.knowledge_passage_tokens} does not fit KNOWLEDGE_TOKEN_BUDGET="
                f"{self.knowledge_token_budget}: a passage with its block takes up to {KNOWLEDGE_BLOCK_TOKENS} tokens "
                f"more; at most {max(room, 0)}"
            )
        if self.knowledge_static_tokens > self.knowledge_token_budget:
            problems.append(
                f"KNOWLEDGE_STATIC_TOKENS={self.knowledge_static_tokens} is more than "
                f"KNOWLEDGE_TOKEN_BUDGET={self.knowledge_token_budget}, the room the documents have in every prompt: "
                "lower it (0 turns it off) or raise KNOWLEDGE_TOKEN_BUDGET"
            )
        if problems:
            raise ValueError("\n".join(problems))
        return self


class MediaSettings(BaseSettings):
    """Photos, voice notes and documents customers send: which kinds are read, how images are sent and
    counted, which model transcribes, and the limits checked before anything is downloaded."""

    model_config = _CONFIG

    images_enabled: bool = Field(default=True, description="photos and image files are read; off: the text-only reply")
    voice_enabled: bool = Field(
        default=True, description="voice notes, audio files and video notes are transcribed; off: the text-only reply"
    )
    documents_enabled: bool = Field(
        default=True, description="PDF, text, Markdown and HTML files are read; off: the text-only reply"
    )
    image_detail: Literal["low", "high", "auto"] = Field(
        default="auto", description="the detail images are sent with (low: a fixed small cost per image)"
    )
    image_tokens_rule: str | None = Field(
        default=None,
        description="how images are counted: a model name, tile:BASE:PER_TILE or patch:MULTIPLIER; unset: the chat "
        "model's published rule (a conservative count for an unknown model)",
    )
    image_max_per_turn: int = Field(
        default=4, ge=1, le=10, description="most images one turn sends (an album's rest is named only)"
    )
    transcription_model: str = Field(
        default="gpt-4o-mini-transcribe", description="the model of the provider's /audio/transcriptions"
    )
    transcription_timeout_seconds: float = Field(
        default=60.0, gt=0, description="timeout of one transcription request, seconds"
    )
    voice_max_seconds: PositiveInt = Field(
        default=300, description="longest voice note, audio file or video note transcribed (checked before download)"
    )
    media_max_bytes: PositiveInt = Field(
        default=20 * 1024 * 1024,
        le=20 * 1024 * 1024,
        description="largest file downloaded (Telegram's getFile serves at most 20 MB)",
    )
    document_max_tokens: int = Field(
        default=3000,
        ge=100,
        description="most tokens of a document's text a turn carries (the customer is told when only the first part "
        "was read); must fit CHAT_INPUT_TOKEN_BUDGET next to the instruction",
    )
    document_timeout_seconds: float = Field(
        default=30.0,
        gt=0,
        le=600,
        description="longest a customer's document may take to read (in a child process, killed then); past it "
        "the customer is told the document is too complex and nothing is stored",
    )


REDIS_SCHEMES = ("redis://", "rediss://", "unix://")


class RedisSettings(BaseSettings):
    """Storage: Redis (one server or a Cluster) or, without REDIS_URL, the in-process store."""

    model_config = _CONFIG

    redis_url: SecretStr | None = Field(
        default=None,
        description="unset: the in-process store (one process only, lost on restart); set for production and for "
        "more than one worker (redis://host:6379/0; on a cluster, any one node)",
    )
    redis_key_prefix: str = Field(
        default="sb",
        pattern=r"^[^{}]+$",
        description="namespace of every key, followed by the bot id (no braces: they would change the keys' "
        "hash slots)",
    )
    redis_max_connections: int = Field(
        default=512,
        ge=8,
        description="connections per Redis server and process; when all are busy a command waits for one "
        "(up to 10 s) instead of failing",
    )
    redis_cluster: Literal["auto", "on", "off"] = Field(
        default="auto",
        description="auto: ask the server at start-up (INFO cluster); on: Redis Cluster; off: one server",
    )

    @field_validator("redis_url")
    @classmethod
    def _redis_scheme(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and not value.get_secret_value().strip().lower().startswith(REDIS_SCHEMES):
            raise ValueError(
                "must start with redis://, rediss:// (TLS) or unix://, e.g. redis://localhost:6379/0; "
                "or leave it unset for the in-process store"
            )
        return value
