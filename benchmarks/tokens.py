"""Tokens spent by four memory policies on the same 300-turn support conversation and budget.

    .venv/bin/python -m benchmarks.tokens [--turns 300] [--budget 6000] [--sweep] [--plot tokens.png]

(a) full history; (b) sliding window; (c) on overflow summarize everything and restart; (d) this
project: the real ChatService against the stub OpenAI server, default settings (``--sweep``: water
marks). The summarizer is a stub that keeps no identifiers, the same for (c) and (d). With prompt
caching (benchmarks.prompt_cost): the cached share and the effective input cost at price ratios 0.5
and 0.1; "+summ" adds the summarizer's input."""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from openai import AsyncOpenAI

from benchmarks.common import machine
from benchmarks.conversation import CONTROL_FACTS, Turn, generate
from benchmarks.prompt_cost import RATIOS, CacheMeter
from prompts import default_registry
from services.backends.memory import InMemorySessionStore
from services.core.prompt_format import customer_block, summary_block
from services.core.records import PromptPart, StoredMessage
from services.core.summary_state import SummaryState, render_summary
from services.core.tokens import TokenCounter
from services.engine.builders import build_chat_service
from services.engine.chat import ChatService
from services.llm.client import LLMClient
from services.memory.summarizer import Summarizer
from services.memory.window import build_window
from services.settings import MemorySettings
from tests.stubs.openai_server import StubOpenAI
from tests.stubs.prompt_cache import PromptTokens

SWEEP = [
    (0.85, 0.5),
    (0.99, 0.15),
    (0.6, 0.3),
    (0.6, 0.1),
    (0.5, 0.2),
    (0.5, 0.1),
    (0.45, 0.15),
    (0.4, 0.1),
    (0.35, 0.1),
    (0.3, 0.15),
    (0.3, 0.05),
]
DEFAULT_HIGH: float = MemorySettings.model_fields["history_high_water"].default
DEFAULT_LOW: float = MemorySettings.model_fields["history_low_water"].default

FIXED_SUMMARY = SummaryState(
    topic="Customer support conversation about deliveries, defects and returns of several products",
    key_facts=["Customer owns several of our products", "Some orders were delayed", "One device shows an error"],
    actions_taken=["Support checked the delivery status", "Support explained the warranty terms"],
    decisions=["A replacement will be prepared after the return"],
    pending_questions=["When will the replacement ship?"],
    next_step="Wait for the courier investigation and the return scan",
)


@dataclass
class PolicyResult:
    name: str
    tokens: PromptTokens
    prompt_tokens: list[int] = field(default_factory=list)
    summary_calls: int = 0
    summary_tokens: int = 0
    verbatim_after_compaction: list[int] = field(default_factory=list)
    final_prompt: str = ""
    chat: CacheMeter = field(init=False)
    """Chat prompts with their cacheable prefixes."""
    summaries: CacheMeter = field(init=False)
    """Summarizer prompts (input only) with their cacheable prefixes."""
    reported_cached: int | None = None
    """(d): cached_tokens the stub model server reported through the real client, summed."""

    def __post_init__(self) -> None:
        self.chat = CacheMeter(self.tokens)
        self.summaries = CacheMeter(self.tokens)

    def meter(self, prompt: Sequence[PromptPart]) -> None:
        self.chat.add((p.role, p.content) for p in prompt)

    @property
    def facts_kept(self) -> float:
        return sum(fact in self.final_prompt for fact in CONTROL_FACTS) / len(CONTROL_FACTS)

    def effective(self, ratio: float, *, summaries: bool = False) -> float:
        return self.chat.effective(ratio) + (self.summaries.effective(ratio) if summaries else 0.0)


def parts(counter: TokenCounter, turns: list[Turn]) -> list[PromptPart]:
    out: list[PromptPart] = []
    for turn in turns:
        user = customer_block(turn.user)
        out.append(PromptPart("user", user, counter.count_message("user", user)))
        out.append(PromptPart("assistant", turn.assistant, counter.count_message("assistant", turn.assistant)))
    return out


def total(instruction: PromptPart, prompt: list[PromptPart]) -> int:
    return sum(p.tokens for p in prompt) + 3


def full_history(
    counter: TokenCounter, tokens: PromptTokens, instruction: PromptPart, turns: list[Turn]
) -> PolicyResult:
    result, history = PolicyResult("(a) full history", tokens), parts(counter, turns)
    for index in range(len(turns)):
        prompt = [instruction, *history[: 2 * index], history[2 * index]]
        result.prompt_tokens.append(total(instruction, prompt))
        result.meter(prompt)
    result.final_prompt = "\n".join(p.content for p in prompt)
    return result


def sliding_window(
    counter: TokenCounter, tokens: PromptTokens, instruction: PromptPart, turns: list[Turn], budget: int
) -> PolicyResult:
    result, history = PolicyResult("(b) sliding window", tokens), parts(counter, turns)
    for index in range(len(turns)):
        window = build_window(
            instruction=instruction,
            context=[],
            history=history[: 2 * index],
            new_message=history[2 * index],
            budget=budget,
        )
        result.prompt_tokens.append(window.estimated_tokens)
        result.meter(window.messages)
    result.final_prompt = "\n".join(p.content for p in window.messages)
    return result


def textbook_hybrid(
    counter: TokenCounter,
    tokens: PromptTokens,
    instruction: PromptPart,
    summarizer: Summarizer,
    turns: list[Turn],
    budget: int,
) -> PolicyResult:
    result, history = PolicyResult("(c) summarize all + restart", tokens), parts(counter, turns)
    block = summary_block(render_summary(FIXED_SUMMARY))
    summary_part = PromptPart("user", block, counter.count_message("user", block))
    output_tokens = counter.count_text(FIXED_SUMMARY.to_json())
    start, summary, just_compacted = 0, None, False
    for index in range(len(turns)):
        context = [summary] if summary else []
        prompt = [instruction, *context, *history[2 * start : 2 * index], history[2 * index]]
        if total(instruction, prompt) > budget and index > start:
            folded = [
                StoredMessage(
                    i,
                    "user" if i % 2 == 0 else "assistant",
                    turns[i // 2].user if i % 2 == 0 else turns[i // 2].assistant,
                    0,
                )
                for i in range(2 * start, 2 * index)
            ]
            request = summarizer.request_messages(FIXED_SUMMARY if summary else None, folded, False)
            result.summary_calls += 1
            result.summary_tokens += counter.count_messages([(p.role, p.content) for p in request]) + output_tokens
            result.summaries.add((p.role, p.content) for p in request)
            summary, start, just_compacted = summary_part, index, True
            prompt = [instruction, summary, history[2 * index]]
        if just_compacted:
            result.verbatim_after_compaction.append((len(prompt) - 3) // 2)
            just_compacted = False
        result.prompt_tokens.append(total(instruction, prompt))
        result.meter(prompt)
    result.final_prompt = "\n".join(p.content for p in prompt)
    return result


async def project_policy(
    counter: TokenCounter,
    tokens: PromptTokens,
    turns: list[Turn],
    budget: int,
    high: float = DEFAULT_HIGH,
    low: float = DEFAULT_LOW,
    name: str = "(d) this project",
) -> PolicyResult:
    result = PolicyResult(name, tokens)
    reported = 0
    stub = StubOpenAI(summary_reply=lambda _body: FIXED_SUMMARY.to_json())
    await stub.start()
    llm = LLMClient(
        client=AsyncOpenAI(api_key="k", base_url=stub.base_url, max_retries=0),
        chat_model="m",
        summary_model="m",
        max_output_tokens=512,
        summary_max_tokens=800,
    )
    memory = MemorySettings(
        _env_file=None,
        chat_input_token_budget=budget,  # type: ignore[call-arg]
        history_high_water=high,
        history_low_water=low,
    )
    chat: ChatService = build_chat_service(
        llm=llm, store=InMemorySessionStore(), memory=memory, instruction_role="developer", counter=counter
    )
    output_tokens = counter.count_text(FIXED_SUMMARY.to_json())
    pending_verbatim_check = False

    async def deliver(_result: object) -> None:
        return None

    try:
        for turn in turns:
            stub.chat_replies.append(turn.assistant)
            outcome = await chat.handle(1, turn.user, deliver=deliver)
            result.prompt_tokens.append(outcome.estimated_tokens)
            reported += outcome.usage.cached_tokens if outcome.usage else 0
            if pending_verbatim_check or (outcome.forced_compaction and outcome.forced_compaction.folded_messages):
                result.verbatim_after_compaction.append(outcome.context_history_messages // 2)
            proactive = outcome.proactive_compaction
            pending_verbatim_check = bool(proactive and proactive.folded_messages)
        for request in stub.summary_requests:
            result.summary_calls += 1
            result.summary_tokens += (
                counter.count_messages([(m["role"], m["content"]) for m in request["messages"]]) + output_tokens
            )
            result.summaries.add((m["role"], m["content"]) for m in request["messages"])
        for request in stub.chat_requests:
            result.chat.add((m["role"], m["content"]) for m in request["messages"])
        result.reported_cached = reported
        result.final_prompt = "\n".join(m["content"] for m in stub.chat_requests[-1]["messages"])
    finally:
        await chat.close()
        await stub.stop()
    return result


def plot(results: list[PolicyResult], path: str, budget: int) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 4.5))
    for res in results:
        ax.plot(range(1, len(res.prompt_tokens) + 1), res.prompt_tokens, label=res.name, linewidth=1.2)
    ax.axhline(budget, color="grey", linestyle="--", linewidth=0.8, label=f"budget {budget}")
    ax.set_yscale("log")
    ax.set_xlabel("turn")
    ax.set_ylabel("prompt tokens (log)")
    ax.set_title("Prompt tokens per turn, four memory policies")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def report(results: list[PolicyResult], budget: int) -> dict[str, Any]:
    print(
        f"{'policy':<30} {'total':>10} {'max':>7} {'over_budget':>11} {'sum_calls':>9} {'sum_tokens':>10} "
        f"{'verbatim_min':>12} {'verbatim_mean':>13} {'facts_kept':>10}"
    )
    figures: dict[str, Any] = {}
    for res in results:
        verbatim = res.verbatim_after_compaction
        row = {
            "total": sum(res.prompt_tokens),
            "max": max(res.prompt_tokens),
            "over_budget": sum(t > budget for t in res.prompt_tokens),
            "summary_calls": res.summary_calls,
            "summary_tokens": res.summary_tokens,
            "verbatim_min": min(verbatim) if verbatim else None,
            "verbatim_mean": round(statistics.mean(verbatim), 1) if verbatim else None,
            "facts_kept": res.facts_kept,
            "cached": res.chat.total_cached,
            "cached_share": res.chat.cached_share,
            "summary_input": res.summaries.total,
            "reported_cached": res.reported_cached,
        }
        for ratio in RATIOS:
            row[f"effective_{ratio}"] = res.effective(ratio)
            row[f"effective_{ratio}_with_summaries"] = res.effective(ratio, summaries=True)
        figures[res.name] = row
        print(
            f"{res.name:<30} {row['total']:>10} {row['max']:>7} {row['over_budget']:>11} {row['summary_calls']:>9} "
            f"{row['summary_tokens']:>10} {row['verbatim_min']!s:>12} {row['verbatim_mean']!s:>13} "
            f"{row['facts_kept']:>10.0%}"
        )
    full = figures["(a) full history"]
    print("\nwith prompt caching (cached = common prefix with the previous prompt, >= 1024 tokens, 128-token blocks):")
    print(
        f"{'policy':<30} {'total':>10} {'cached':>7} {'eff@0.5':>10} {'eff@0.1':>10} {'vs(a)@0.5':>9} "
        f"{'vs(a)@0.1':>9} {'summ_input':>10} {'+summ@0.5':>10} {'+summ vs(a)@0.5':>15}"
    )
    for name, row in figures.items():
        print(
            f"{name:<30} {row['total']:>10} {row['cached_share']:>7.1%} {row['effective_0.5']:>10.0f} "
            f"{row['effective_0.1']:>10.0f} {row['effective_0.5'] / full['effective_0.5']:>9.3f} "
            f"{row['effective_0.1'] / full['effective_0.1']:>9.3f} {row['summary_input']:>10} "
            f"{row['effective_0.5_with_summaries']:>10.0f} "
            f"{row['effective_0.5_with_summaries'] / full['effective_0.5']:>15.3f}"
        )
    return figures


def sweep_line(res: PolicyResult, full: PolicyResult, high: float, low: float) -> str:
    verbatim = min(res.verbatim_after_compaction or [0])
    spent = sum(res.prompt_tokens)
    costs = " ".join(
        f"eff@{ratio}={res.effective(ratio) / full.effective(ratio):.3f}"
        f"(+summ {res.effective(ratio, summaries=True) / full.effective(ratio):.3f})"
        for ratio in RATIOS
    )
    return (
        f"  {high:.2f}/{low:.2f}: total={spent} ({spent / sum(full.prompt_tokens):.3f} of a) "
        f"cached={res.chat.cached_share:.1%} {costs} max={max(res.prompt_tokens)} "
        f"summary_calls={res.summary_calls} summary_input={res.summaries.total} "
        f"verbatim_min={verbatim} facts_kept={res.facts_kept:.0%}"
    )


def _policies(
    args: argparse.Namespace, counter: TokenCounter, tokens: PromptTokens, turns: list[Turn]
) -> list[PolicyResult]:
    """(a)–(d) over the same conversation."""
    registry = default_registry()
    text = registry.get("support_chat").render(company="our company", handoff="", knowledge="")
    instruction = PromptPart("developer", text, counter.count_message("developer", text))
    summarizer = Summarizer(
        llm=None,
        counter=counter,
        prompt=registry.get("summary"),  # type: ignore[arg-type]
        max_tokens=800,
        instruction_role="developer",
    )
    return [
        full_history(counter, tokens, instruction, turns),
        sliding_window(counter, tokens, instruction, turns, args.budget),
        textbook_hybrid(counter, tokens, instruction, summarizer, turns, args.budget),
        asyncio.run(project_policy(counter, tokens, turns, args.budget)),
    ]


def _goals(figures: dict[str, Any]) -> dict[str, bool]:
    """Print (d) against (a) and (c), and whether each goal is met."""
    ours, full, textbook = (
        figures["(d) this project"],
        figures["(a) full history"],
        figures["(c) summarize all + restart"],
    )
    goals = {
        "every prompt within budget": ours["over_budget"] == 0,
        "effective input cost (ratio 0.5) <= 1/10 of full history": ours["effective_0.5"] * 10 <= full["effective_0.5"],
        "total <= 1/10 of full history": ours["total"] * 10 <= full["total"],
        "fewer summary calls than (c)": ours["summary_calls"] < textbook["summary_calls"],
        ">= 4 verbatim turns after every compaction": (ours["verbatim_min"] or 0) >= 4,
        "100% control identifiers kept": ours["facts_kept"] == 1.0,
    }
    print(
        f"(d) total / (a) total = {ours['total'] / full['total']:.3f}; "
        f"(d) effective cost / (a) at ratio 0.5 = {ours['effective_0.5'] / full['effective_0.5']:.3f} "
        f"(with summarizer input {ours['effective_0.5_with_summaries'] / full['effective_0.5']:.3f}); "
        f"(d) summary calls / (c) = {ours['summary_calls']}/{textbook['summary_calls']}; "
        f"(d) cached_tokens reported by the stub server = {ours['reported_cached']} (metered: {ours['cached']})"
    )
    for goal, met in goals.items():
        print(f"goal: {goal}: {'met' if met else 'NOT met'}")
    return goals


def _sweep(
    args: argparse.Namespace, counter: TokenCounter, tokens: PromptTokens, turns: list[Turn], full: PolicyResult
) -> None:
    print(
        "water-mark sweep of (d): high/low → total and effective cost vs (a) (chat prompts, and with the "
        "summarizer's input), max prompt, summary calls, min verbatim turns, facts kept"
    )
    for high, low in SWEEP:
        res = asyncio.run(project_policy(counter, tokens, turns, args.budget, high, low, f"(d) {high}/{low}"))
        print(sweep_line(res, full, high, low), flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--turns", type=int, default=300)
    parser.add_argument("--budget", type=int, default=6000)
    parser.add_argument("--plot", default="", help="write a PNG of prompt tokens per turn here")
    parser.add_argument("--json", default="", help="write the figures as JSON here")
    parser.add_argument(
        "--sweep", action="store_true", help="also run (d) with other HISTORY_HIGH_WATER/HISTORY_LOW_WATER pairs"
    )
    args = parser.parse_args(argv)
    counter = TokenCounter.for_encoding()
    turns = generate(args.turns)
    tokens = PromptTokens(counter)
    results = _policies(args, counter, tokens, turns)
    print(
        f"machine: {machine()}; turns={args.turns} budget={args.budget} "
        f"(d) water marks {DEFAULT_HIGH}/{DEFAULT_LOW} (the defaults)"
    )
    figures = report(results, args.budget)
    goals = _goals(figures)
    if args.sweep:
        _sweep(args, counter, tokens, turns, results[0])
    if args.plot:
        plot(results, args.plot, args.budget)
        print(f"plot: {args.plot}")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"figures": figures, "goals": goals}, handle, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
