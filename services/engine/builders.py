"""The engine's parts built from settings: the model client, the summarizer, the grounding, the chat
service, image notes and the media reader, each given its observers at construction. The bot's one
composition root (``bot.factory.build_app``) composes them; the evaluation runner, the benchmarks and
the tests use them alone."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import openai
from openai import AsyncOpenAI

from prompts import PromptRegistry, default_registry
from prompts.actions import RULES as ACTION_RULES
from prompts.support_chat import HANDOFF, knowledge_rules
from services.core.errors import ConfigurationError
from services.core.retry import RetryPolicy
from services.core.tokens import TokenCounter
from services.engine.chat import ChatService
from services.engine.decisions import Decisions
from services.engine.grounding import Grounding
from services.engine.tool_loop import ToolLoop
from services.engine.turn_steps import TurnStep
from services.llm.client import Call, LLMClient
from services.llm.dialect import Dialect
from services.media.notes import ImageNotes
from services.media.reader import MediaReader
from services.media.transcriber import Transcriber
from services.media.vocabulary import Glossary
from services.memory.breaker import CircuitBreaker
from services.memory.policy import WaterMarkPolicy
from services.memory.summarizer import Summarizer
from services.memory.summary_format import FormatSetting
from services.ports.actions import ActionLedger, ActionTools
from services.ports.chat_model import ChatModel
from services.ports.knowledge import KnowledgeGaps, KnowledgeSource
from services.ports.media import MediaMemos
from services.ports.observer import TurnObserver
from services.ports.sessions import SessionStore
from services.settings import KnowledgeSettings, LLMSettings, MediaSettings, MemorySettings

IMAGE_NOTE_WORDS = 30

log = logging.getLogger(__name__)

CALL_DEADLINE_TIMEOUTS = 3
"""A model call retries no longer than this many OPENAI_TIMEOUT_SECONDS from its start."""


def _http_client(settings: LLMSettings) -> Any:
    """aiohttp under the SDK's httpx interface (``openai.DefaultAioHttpClient``) when asked for and
    available, else None (the SDK's own httpx client)."""
    if settings.openai_http_client != "aiohttp":
        return None
    aiohttp_client = getattr(openai, "DefaultAioHttpClient", None)
    if aiohttp_client is None:
        log.warning("OPENAI_HTTP_CLIENT=aiohttp: this openai version has no aiohttp transport; using httpx")
        return None
    try:
        return aiohttp_client(timeout=settings.openai_timeout_seconds)
    except RuntimeError as exc:  # the SDK's aiohttp extra is missing
        log.warning("OPENAI_HTTP_CLIENT=aiohttp unavailable (%s); using httpx", exc)
        return None


def build_llm_client(
    settings: LLMSettings,
    memory: MemorySettings,
    *,
    cache_key_secret: bytes = b"",
    on_in_flight: Callable[[int], None] | None = None,
    on_accepted: Callable[[Call], None] | None = None,
) -> LLMClient:
    """Raises ConfigurationError when OPENAI_API_KEY is empty (no placeholder key is ever sent).
    ``cache_key_secret`` keys the chats' prompt_cache_key hashes (when OPENAI_PROMPT_CACHE_KEY sends them);
    ``on_in_flight`` and ``on_accepted``: the client's observers (``LLMClient``)."""
    api_key = settings.openai_api_key.get_secret_value().strip()
    if not api_key:
        raise ConfigurationError("OPENAI_API_KEY is not set")
    client = AsyncOpenAI(
        api_key=api_key,
        base_url=settings.openai_base_url,
        timeout=settings.openai_timeout_seconds,
        max_retries=0,  # one retry policy owns a call's requests (RetryPolicy), not the SDK's on top
        http_client=_http_client(settings),
    )
    return LLMClient(
        client=client,
        chat_model=settings.openai_model,
        summary_model=settings.effective_summary_model,
        max_output_tokens=settings.max_output_tokens,
        summary_max_tokens=memory.summary_max_tokens,
        dialect=Dialect(
            instruction_role=settings.openai_instruction_role,
            token_limit_param=settings.openai_token_limit_param,
            base_url=settings.openai_base_url,
        ),
        temperature=settings.openai_temperature,
        max_concurrency=settings.llm_max_concurrency,
        cache_key_secret=cache_key_secret if settings.sends_prompt_cache_key else None,
        retry=RetryPolicy(
            max_retries=settings.openai_max_retries,
            base_seconds=settings.llm_retry_base_seconds,
            max_seconds=settings.llm_retry_max_seconds,
            in_call_max_wait_seconds=settings.llm_retry_in_call_max_wait_seconds,
            deadline_seconds=CALL_DEADLINE_TIMEOUTS * settings.openai_timeout_seconds,
        ),
        on_in_flight=on_in_flight,
        on_accepted=on_accepted,
    )


def instruction_role(llm: LLMClient) -> str:
    """The role the engine builds its instruction messages with: the client's at start (it sends them
    with the one it uses at the time, learnt from the endpoint)."""
    return llm.dialect.role or "system"


@dataclass(frozen=True)
class SummaryObservers:
    """What the summarizer tells its owner (``Summarizer``'s ``on_*``; None: nobody): each request's
    outcome, a refusal of the bot, each accepted request, and the circuit breaker opening or closing."""

    attempt: Callable[[str], None] | None = None
    refused: Callable[[int | None, str], None] | None = None
    accepted: Callable[[], None] | None = None
    breaker: Callable[[bool], None] | None = None


def build_summarizer(
    *,
    llm: LLMClient,
    memory: MemorySettings,
    counter: TokenCounter,
    prompts: PromptRegistry,
    instruction_role: str,
    response_format: FormatSetting = "auto",
    observers: SummaryObservers | None = None,
) -> Summarizer:
    seen = observers or SummaryObservers()
    return Summarizer(
        llm=llm,
        counter=counter,
        prompt=prompts.get("summary", memory.summary_prompt_version),
        max_tokens=memory.summary_max_tokens,
        instruction_role=instruction_role,
        response_format=response_format,
        breaker=CircuitBreaker(
            failures=memory.summary_breaker_failures,
            cooldown=memory.summary_breaker_cooldown_seconds,
            on_change=seen.breaker,
        ),
        on_attempt=seen.attempt,
        on_refused=seen.refused,
        on_accepted=seen.accepted,
    )


def build_grounding(
    knowledge: KnowledgeSource,
    options: KnowledgeSettings,
    *,
    counter: TokenCounter,
    role: str,
    gaps: KnowledgeGaps | None,
) -> Grounding:
    return Grounding(
        source=knowledge,
        counter=counter,
        role=role,
        budget=options.knowledge_token_budget,
        top_k=options.knowledge_top_k,
        gaps=gaps,
        static_tokens=options.knowledge_static_tokens,
    )


def grounding_and_rules(
    knowledge: KnowledgeSource | None,
    settings: KnowledgeSettings | None,
    counter: TokenCounter,
    role: str,
    gaps: KnowledgeGaps | None,
    *,
    handoff: bool,
) -> tuple[Grounding | None, str]:
    """The grounding of ``knowledge`` (if any) and the instruction's rules for it."""
    if knowledge is None:
        return None, ""
    options = settings if settings is not None else KnowledgeSettings()
    grounding = build_grounding(knowledge, options, counter=counter, role=role, gaps=gaps)
    return grounding, knowledge_rules(handoff=handoff, whole=options.knowledge_static_tokens > 0)


def water_mark_policy(memory: MemorySettings) -> WaterMarkPolicy:
    return WaterMarkPolicy(
        high_water=memory.history_high_water,
        low_water=memory.history_low_water,
        min_verbatim_turns=memory.history_min_verbatim_turns,
    )


def build_actions(
    actions: ActionTools,
    ledger: ActionLedger | None,
    *,
    llm: ChatModel,
    counter: TokenCounter,
    budget: int,
    max_calls: int,
    confirm_seconds: float,
    approval_seconds: float = 86400,
) -> tuple[ToolLoop, Decisions]:
    """The tool loop step and the decisions of ``actions`` (ACTIONS_FILE), on the backend's ledger."""
    if ledger is None:
        raise ConfigurationError("actions need the backend's action ledger")
    loop = ToolLoop(
        actions=actions,
        ledger=ledger,
        llm=llm,
        counter=counter,
        budget=budget,
        max_calls=max_calls,
        confirm_seconds=confirm_seconds,
        approval_seconds=approval_seconds,
    )
    return loop, Decisions(actions=actions, ledger=ledger, counter=counter)


def build_chat_service(
    *,
    llm: LLMClient,
    store: SessionStore,
    memory: MemorySettings,
    instruction_role: str,
    counter: TokenCounter | None = None,
    prompts: PromptRegistry | None = None,
    observer: TurnObserver | None = None,
    handoff: bool = False,
    summary_response_format: FormatSetting = "auto",
    summary_observers: SummaryObservers | None = None,
    knowledge: KnowledgeSource | None = None,
    knowledge_settings: KnowledgeSettings | None = None,
    gaps: KnowledgeGaps | None = None,
    notes: ImageNotes | None = None,
    after_answer: Sequence[TurnStep] = (),
    actions: ActionTools | None = None,
    ledger: ActionLedger | None = None,
    actions_max_calls: int = 4,
    actions_confirm_seconds: float = 600,
    actions_approval_seconds: float = 86400,
) -> ChatService:
    """A ChatService from settings (``after_answer``: ChatService's); ConfigurationError for an unusable
    budget. ``actions`` (ACTIONS_FILE) with the backend's ``ledger``: the tool loop after the answer,
    with the ``actions_*`` settings (calls a turn, how long a confirmation and an approval wait)."""
    counter = counter or TokenCounter.for_encoding(memory.tokenizer_encoding)
    loop, decisions = build_actions(
        actions, ledger, llm=llm, counter=counter, budget=memory.chat_input_token_budget,
        max_calls=actions_max_calls, confirm_seconds=actions_confirm_seconds, approval_seconds=actions_approval_seconds,
    ) if actions is not None else (None, None)  # fmt: skip
    prompts, role = prompts or default_registry(), instruction_role
    chat_prompt = prompts.get("support_chat", memory.chat_prompt_version)  # named first when unknown
    grounding, rules = grounding_and_rules(knowledge, knowledge_settings, counter, role, gaps, handoff=handoff)
    summarizer = build_summarizer(
        llm=llm, memory=memory, counter=counter, prompts=prompts, instruction_role=role,
        response_format=summary_response_format, observers=summary_observers,
    )  # fmt: skip
    # variables a version does not use are ignored (v1 has no $handoff)
    instruction = chat_prompt.render(
        company=memory.support_company_name, handoff=HANDOFF if handoff else "", knowledge=rules
    ) + (ACTION_RULES if actions is not None else "")  # fmt: skip
    return ChatService(
        store=store,
        llm=llm,
        summarizer=summarizer,
        counter=counter,
        instruction=instruction,
        instruction_role=role,
        budget=memory.chat_input_token_budget,
        summary_max_tokens=memory.summary_max_tokens,
        policy=water_mark_policy(memory),
        max_message_chars=memory.max_message_chars,
        observer=observer,
        handoff_tool=handoff,
        grounding=grounding,
        notes=notes,
        after_answer=(*after_answer, loop) if loop is not None else after_answer,
        decisions=decisions,
    )


def build_image_notes(
    *, llm: ChatModel, counter: TokenCounter, role: str, memos: MediaMemos | None, prompts: PromptRegistry | None = None
) -> ImageNotes:
    instruction = (prompts or default_registry()).get("image_note").render(max_words=str(IMAGE_NOTE_WORDS))
    return ImageNotes(llm=llm, counter=counter, instruction=instruction, role=role, memos=memos)


def build_media_reader(
    settings: MediaSettings,
    llm: LLMSettings,
    *,
    counter: TokenCounter,
    memos: MediaMemos | None,
    knowledge: KnowledgeSource | None = None,
) -> MediaReader:
    """The reader of customers' files; voice needs OPENAI_API_KEY's provider to serve /audio/transcriptions."""
    transcriber, client = None, None
    if settings.voice_enabled:
        client = AsyncOpenAI(
            api_key=llm.openai_api_key.get_secret_value().strip(),
            base_url=llm.openai_base_url,
            timeout=settings.transcription_timeout_seconds,
            max_retries=0,  # the queue retries the turn; a transcript already made is kept (memos)
        )
        transcriber = Transcriber(
            client=client, model=settings.transcription_model, timeout=settings.transcription_timeout_seconds
        )
    return MediaReader(
        settings=settings,
        model=llm.openai_model,
        counter=counter,
        transcriber=transcriber,
        memos=memos,
        vocabulary=_vocabulary(knowledge),
        on_close=client.close if client is not None else None,
    )


def _vocabulary(knowledge: KnowledgeSource | None) -> Callable[[], str | None]:
    if knowledge is None:
        return lambda: None
    glossary = Glossary()
    return lambda: glossary(knowledge.current().passages)
