"""Prometheus metrics of the engine and the workers (one registry per process)."""

from __future__ import annotations

import logging
import time
from collections.abc import Collection
from typing import TYPE_CHECKING

from prometheus_client import Counter, Gauge, Histogram

from services.core.actions import ActionOutcome
from services.core.turns import CompactionReport, TurnResult

if TYPE_CHECKING:
    from services.knowledge.library import KnowledgeLibrary

log = logging.getLogger(__name__)

_LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2, 4, 8, 16, 32, 64)

TURNS = Counter("sb_turns_total", "Customer messages handled, by outcome", ["outcome"])
ERRORS = Counter("sb_errors_total", "Failed updates, by error kind", ["kind"])
LLM_SECONDS = Histogram("sb_llm_call_seconds", "LLM call latency", ["call"], buckets=_LATENCY_BUCKETS)
KNOWLEDGE_SECONDS = Histogram(
    "sb_knowledge_retrieval_seconds",
    "Knowledge retrieval latency per turn",
    buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 1.0),
)
KNOWLEDGE_PASSAGES = Histogram(
    "sb_knowledge_passages_per_turn", "Passages a prompt carried", buckets=(0, 1, 2, 3, 4, 6, 8, 12)
)
KNOWLEDGE_NO_MATCH = Counter("sb_knowledge_no_match_total", "Turns no document passage cleared the floor for")
KNOWLEDGE_DEGRADED = Counter(
    "sb_knowledge_degraded_total", "Turns ranked by full text only because the query embedding failed"
)
EMBEDDING_REQUESTS = Counter("sb_embedding_requests_total", "Requests to /embeddings", ["kind", "outcome"])
KNOWLEDGE_INDEX_PASSAGES = Gauge("sb_knowledge_passages", "Passages in the knowledge index in use")
KNOWLEDGE_INDEX_AGE = Gauge("sb_knowledge_index_age_seconds", "Seconds since the index in use was built")
KNOWLEDGE_SKIPPED = Gauge("sb_knowledge_skipped_files", "Files of KNOWLEDGE_DIR the index in use skipped")
PROMPT_TOKENS_ESTIMATED = Counter("sb_prompt_tokens_estimated_total", "Prompt tokens estimated by the window")
PROMPT_TOKENS_ACTUAL = Counter("sb_prompt_tokens_actual_total", "Prompt tokens reported by the provider", ["call"])
PROMPT_TOKENS_CACHED = Counter(
    "sb_prompt_tokens_cached_total",
    "Prompt tokens the provider served from its prompt cache (billed at a discount)",
    ["call"],
)
COMPLETION_TOKENS = Counter("sb_completion_tokens_total", "Completion tokens reported by the provider", ["call"])
TOKEN_DRIFT = Histogram(
    "sb_prompt_token_drift_ratio",
    "(actual - estimated) / estimated prompt tokens of chat calls",
    buckets=(-0.5, -0.2, -0.1, -0.05, -0.02, 0, 0.02, 0.05, 0.1, 0.2, 0.5),
)
SUMMARY_CALLS = Counter(
    "sb_summary_calls_total", "Summary model requests, by outcome (ok, invalid, rejected, failed)", ["outcome"]
)
SUMMARY_BREAKER_OPEN = Gauge("sb_summary_breaker_open", "1 while summary calls are paused after repeated failures")
SUMMARY_EXTRACTIVE_FOLDS = Counter(
    "sb_summary_extractive_folds_total", "Turns forced out of the prompt without a summary, kept by their identifiers"
)
SUMMARY_FAILURES = Counter("sb_summary_failures_total", "Compactions that failed (summarizer error or invalid JSON)")
COMPACTIONS = Counter("sb_compactions_total", "Compactions applied", ["kind"])
RESTORED_IDENTIFIERS = Counter("sb_restored_identifiers_total", "Identifiers put back into a summary")
QUEUE_DUE = Gauge("sb_queue_due_chats", "Chats with work waiting to be claimed")
QUEUE_OLDEST_AGE = Gauge("sb_queue_oldest_age_seconds", "How long the longest-waiting due chat has waited")
QUEUE_WAIT = Histogram(
    "sb_queue_wait_seconds",
    "Time from intake to the start of processing of an update",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
)
REDELIVERIES = Counter("sb_redeliveries_total", "Updates received again (already taken in or already answered)")
DUPLICATE_REPLIES = Counter(
    "sb_possible_duplicate_replies_total", "Replies sent again because an earlier attempt may have died after sending"
)
RATE_LIMITED = Counter("sb_rate_limited_total", "Messages refused by the per-chat rate limit")
LLM_IN_FLIGHT = Gauge("sb_llm_calls_in_flight", "LLM calls running in this process")
LLM_PROVIDER_REFUSING = Gauge(
    "sb_llm_provider_refusing",
    "1 while the model provider refuses the bot (key, access, model or quota: an operator must act), by call",
    ["call"],
)
LLM_PROVIDER_REFUSALS = Counter(
    "sb_llm_provider_refusals_total", "Model calls the provider refused the bot itself, by call and HTTP status",
    ["call", "status"],
)  # fmt: skip
GIVEN_UP_TOLD = Counter(
    "sb_given_up_told_total", "Customers told their message could not be answered (their update was given up)"
)
DEAD_LETTERS = Counter("sb_dead_letters_total", "Updates moved to the dead letters, by where it happened", ["stage"])
DEAD_LETTERS_WAITING = Gauge("sb_dead_letters_waiting", "Dead letters waiting for an operator (whole bot)")
LEASES_LOST = Counter("sb_leases_lost_total", "Chats whose lease this worker lost while serving them (turn abandoned)")
QUARANTINED = Counter("sb_quarantined_sessions_total", "Unreadable sessions moved aside; the chat started over")
HANDOFFS_OPENED = Counter("sb_handoffs_opened_total", "Handoffs to a human operator opened, by trigger", ["trigger"])
HANDOFFS_CLOSED = Counter("sb_handoffs_closed_total", "Handoffs ended, by who ended them", ["by"])
HANDOFFS_OPEN = Gauge("sb_handoffs_open", "Handoffs open now (whole bot)")
HANDOFF_POSSIBLE_DUPLICATES = Counter(
    "sb_handoff_possible_duplicates_total",
    "Messages copied again because an earlier attempt died between copying and recording them",
)
HANDOFF_TICKETS = Counter("sb_handoff_tickets_total", "Tickets posted to the operator group (rate: tickets per hour)")
CONVERSATIONS = Counter("sb_conversations_total", "Conversations started (docs/quality.md)")
CONVERSATIONS_HANDED_OFF = Counter("sb_conversations_handed_off_total", "Conversations handed to a person (once each)")
FEEDBACK_ASKED = Counter("sb_feedback_asked_total", "Feedback questions sent (one per conversation at most)")
FEEDBACK_ANSWERS = Counter("sb_feedback_answers_total", "Feedback answers, by answer (yes / no)", ["answer"])
for _answer in ("yes", "no"):  # both series exist from the start (the dashboard's ratios read them)
    FEEDBACK_ANSWERS.labels(_answer)
FEEDBACK_POSSIBLE_DUPLICATES = Counter(
    "sb_feedback_possible_duplicates_total",
    "Feedback questions sent again because an earlier attempt died between sending and recording them",
)
FIRST_ANSWER = Histogram(
    "sb_first_answer_seconds",
    "Time from a conversation's first customer message to the bot's first answer sent",
    buckets=(0.5, 1, 2, 3, 5, 8, 13, 20, 30, 60, 120, 300),
)
HANDOFF_FIRST_REPLY = Histogram(
    "sb_handoff_first_reply_seconds",
    "Time from a handoff's start to the first operator message",
    buckets=(10, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200),
)
TASK_RESTARTS = Counter("sb_task_restarts_total", "Long-running tasks restarted after a crash", ["task"])
OPTIONAL_CALL_FAILURES = Counter(
    "sb_optional_call_failures_total",
    "Best-effort Bot API calls (command menu, typing, drafts) that failed and were dropped",
    ["method", "kind"],
)

ACTION_CALLS = Counter(
    "sb_action_calls_total",
    "Tool calls of the model (ACTIONS_FILE), by tool and outcome (ok, refused, failed, timeout, pending_confirmation, "
    "pending_approval, needs_contact, declined, expired)",
    ["tool", "outcome"],
)
ACTION_SECONDS = Histogram(
    "sb_action_call_seconds",
    "Latency of the requests made to the operator's API, by tool",
    ["tool"],
    buckets=(0.05, 0.1, 0.25, 0.5, 1, 2, 4, 8, 15, 30),
)
CONFIRMATIONS = Counter(
    "sb_action_confirmations_total",
    "Writes put to the customer's button, by step (asked, accepted, declined, expired)",
    ["step"],
)
APPROVALS = Counter(
    "sb_action_approvals_total", "Actions put to the operators, by step (asked, approved, rejected)", ["step"]
)
for _step in ("asked", "accepted", "declined", "expired"):
    CONFIRMATIONS.labels(_step)  # every step's series exists from the start (at 0): the dashboard shows them
for _step in ("asked", "approved", "rejected"):
    APPROVALS.labels(_step)
TOOL_LABEL_LIMIT = 64


def tool_label(name: str, known: Collection[str] | None = None) -> str:
    """A tool's name as a label: one the operator's file declares (``known``, when given) and of a
    label's shape (letters, digits, ``_``, ``-``), else ``unknown`` (a model may call a tool that
    does not exist: its name is text the model wrote, not a label)."""
    shaped = 0 < len(name) <= TOOL_LABEL_LIMIT and name.isascii() and name.replace("_", "a").replace("-", "a").isalnum()
    if not shaped or (known is not None and name not in known):
        return "unknown"
    return name


def record_actions(
    actions: tuple[ActionOutcome, ...], pending_risk: str | None, *, known: Collection[str] | None = None
) -> None:
    """A turn's tool calls (by tool and outcome kind, the requests' latency) and the decision it put
    to a person (asked)."""
    for outcome in actions:
        tool = tool_label(outcome.tool, known)
        ACTION_CALLS.labels(tool, outcome.kind).inc()
        if outcome.requested:
            ACTION_SECONDS.labels(tool).observe(outcome.seconds)
    if pending_risk == "write":
        CONFIRMATIONS.labels("asked").inc()
    elif pending_risk == "approval":
        APPROVALS.labels("asked").inc()


def record_compaction(kind: str, report: CompactionReport | None) -> None:
    if report is None:
        return
    for usage in report.usage:
        PROMPT_TOKENS_ACTUAL.labels("summary").inc(usage.prompt_tokens)
        PROMPT_TOKENS_CACHED.labels("summary").inc(usage.cached_tokens)
        COMPLETION_TOKENS.labels("summary").inc(usage.completion_tokens)
    if report.usage:
        LLM_SECONDS.labels("summary").observe(report.seconds)
    if report.extractive and report.folded_messages:
        SUMMARY_EXTRACTIVE_FOLDS.inc()
    if report.failed:
        SUMMARY_FAILURES.inc()
    elif report.folded_messages:
        COMPACTIONS.labels(kind).inc()
        RESTORED_IDENTIFIERS.inc(report.restored_identifiers)


def count_summary_attempt(outcome: str) -> None:
    """The summarizer's ``on_attempt``: every summary request by outcome."""
    SUMMARY_CALLS.labels(outcome).inc()


def show_summary_breaker(is_open: bool) -> None:
    """The summary circuit breaker's ``on_change``: its state as a gauge."""
    SUMMARY_BREAKER_OPEN.set(1 if is_open else 0)


def count_embedding_request(kind: str, ok: bool) -> None:
    """The embedder's ``on_request``: every request to /embeddings by kind and outcome."""
    EMBEDDING_REQUESTS.labels(kind, "ok" if ok else "failed").inc()


def record_turn(
    result: TurnResult, *, drift_warn_ratio: float = 0.15, tools: Collection[str] | None = None
) -> float | None:
    """Count one handled message; returns the prompt-token drift ratio when the provider reported usage.
    ``tools``: the declared tools' names (other names are labelled ``unknown``)."""
    if result.quarantined:
        QUARANTINED.inc()
    if result.redelivered:
        TURNS.labels("redelivered").inc()
        DUPLICATE_REPLIES.inc()
        return None
    if result.duplicate:
        TURNS.labels("duplicate").inc()
        REDELIVERIES.inc()
        return None
    TURNS.labels("ok").inc()
    LLM_SECONDS.labels("chat").observe(result.llm_seconds)
    record_actions(result.actions, result.pending.risk if result.pending is not None else None, known=tools)
    PROMPT_TOKENS_ESTIMATED.inc(result.estimated_tokens)
    record_compaction("forced", result.forced_compaction)
    record_compaction("proactive", result.proactive_compaction)
    if result.knowledge_matched is not None:
        KNOWLEDGE_SECONDS.observe(result.knowledge_seconds)
        KNOWLEDGE_PASSAGES.observe(len(result.knowledge))
        if not result.knowledge_matched:
            KNOWLEDGE_NO_MATCH.inc()
        if result.knowledge_degraded:
            KNOWLEDGE_DEGRADED.inc()
    if result.usage is None:
        return None
    PROMPT_TOKENS_ACTUAL.labels("chat").inc(result.usage.prompt_tokens)
    PROMPT_TOKENS_CACHED.labels("chat").inc(result.usage.cached_tokens)
    COMPLETION_TOKENS.labels("chat").inc(result.usage.completion_tokens)
    counted = result.first_prompt_tokens if result.first_prompt_tokens is not None else result.usage.prompt_tokens
    if not result.estimated_tokens:
        return None
    # the estimate is of the first request's prompt: a tool loop's later calls are not in it
    drift = (counted - result.estimated_tokens) / result.estimated_tokens
    TOKEN_DRIFT.observe(drift)
    if abs(drift) > drift_warn_ratio:
        log.warning(
            "prompt token estimate off by %+.0f%% (estimated %d, provider counted %d): leave more headroom "
            "in CHAT_INPUT_TOKEN_BUDGET or check TOKENIZER_ENCODING for this model",
            drift * 100,
            result.estimated_tokens,
            counted,
        )
    return drift


class PrometheusObserver:
    """The bot's TurnObserver: every turn the engine handles lands in the metrics above."""

    def __init__(self, *, drift_warn_ratio: float = 0.15, tools: Collection[str] | None = None) -> None:
        self._drift_warn_ratio = drift_warn_ratio
        self._tools = frozenset(tools) if tools is not None else None

    def turn_finished(self, result: TurnResult) -> None:
        record_turn(result, drift_warn_ratio=self._drift_warn_ratio, tools=self._tools)


def watch_knowledge(library: KnowledgeLibrary) -> None:
    """The index gauges read the snapshot in use at scrape time."""
    KNOWLEDGE_INDEX_PASSAGES.set_function(lambda: len(library.current().passages))
    KNOWLEDGE_SKIPPED.set_function(lambda: len(library.current().skipped))
    KNOWLEDGE_INDEX_AGE.set_function(lambda: time.time() - library.current().built_at)
