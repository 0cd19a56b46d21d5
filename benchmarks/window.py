"""Time to prepare one prompt, the project's window vs the textbook re-tokenizing window, side by side.

    .venv/bin/python -m benchmarks.window [--sizes 10 100 1000 5000] [--budget 6000]

Ours: token counts were computed once when each message was stored, so preparing a prompt counts only
the new message and walks the history once. Reference: the textbook version that, for each older turn,
rebuilds the candidate prompt and tokenizes all of it again (after first checking whether the whole
history fits)."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable

from benchmarks.common import machine
from benchmarks.conversation import generate
from prompts import default_registry
from services.core.prompt_format import customer_block, summary_block
from services.core.records import PromptPart, StoredMessage
from services.core.tokens import TokenCounter
from services.engine.turn_window import render_stored
from services.memory.window import build_window


def stored_history(counter: TokenCounter, turns: int) -> list[StoredMessage]:
    conversation = (generate(turns=max(turns, 1), seed=3) * 1)[:turns]
    history: list[StoredMessage] = []
    for turn in conversation:
        user = customer_block(turn.user)
        history.append(StoredMessage(len(history), "user", turn.user, counter.count_message("user", user)))
        history.append(
            StoredMessage(len(history), "assistant", turn.assistant, counter.count_message("assistant", turn.assistant))
        )
    return history


def ours(
    counter: TokenCounter,
    instruction: PromptPart,
    summary: PromptPart,
    history: list[StoredMessage],
    text: str,
    budget: int,
) -> int:
    content = customer_block(text)
    new = PromptPart("user", content, counter.count_message("user", content))
    window = build_window(
        instruction=instruction,
        context=[summary],
        history=history,
        new_message=new,
        budget=budget,
        render=render_stored,
    )
    return window.context_history_messages


def reference(
    counter: TokenCounter,
    instruction: PromptPart,
    summary: PromptPart,
    history: list[StoredMessage],
    text: str,
    budget: int,
) -> int:
    new = ("user", customer_block(text))
    head = [(instruction.role, instruction.content), (summary.role, summary.content)]
    everything = [(m.role, render_stored(m).content) for m in history]
    if counter.count_messages([*head, *everything, new]) <= budget:
        return len(everything)
    included: list[tuple[str, str]] = []
    for start in range(len(everything) - 2, -1, -2):
        candidate = [*head, *everything[start : start + 2], *included, new]
        if counter.count_messages(candidate) > budget:
            break
        included = everything[start : start + 2] + included
    return len(included)


def timed(fn: Callable[[], int], min_seconds: float = 0.3, max_runs: int = 2000) -> tuple[float, int]:
    """Median-free simple timing: repeat until ``min_seconds`` elapsed; returns (seconds per call, result)."""
    runs, started, result = 0, time.perf_counter(), 0
    while True:
        result = fn()
        runs += 1
        elapsed = time.perf_counter() - started
        if elapsed >= min_seconds or runs >= max_runs:
            return elapsed / runs, result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[10, 100, 1000, 5000])
    parser.add_argument("--budget", type=int, default=6000)
    parser.add_argument("--min-seconds", type=float, default=0.5)
    args = parser.parse_args(argv)
    counter = TokenCounter.for_encoding()
    text = "My order ORD-77182 still has not arrived, what should I do?"
    instruction_text = default_registry().get("support_chat").render(company="ACME", handoff="", knowledge="")
    instruction = PromptPart("developer", instruction_text, counter.count_message("developer", instruction_text))
    summary_text = summary_block("Topic: late delivery\nKey facts: order ORD-77182; Aurora X2 kettle")
    summary = PromptPart("user", summary_text, counter.count_message("user", summary_text))
    print(f"machine: {machine()}; budget={args.budget}")
    print(f"{'turns':>6} {'ours_us':>10} {'reference_us':>14} {'ratio':>8} {'turns_sent':>10}")
    for size in args.sizes:
        history = stored_history(counter, size)
        ours_s, ours_n = timed(
            lambda h=history: ours(counter, instruction, summary, h, text, args.budget), args.min_seconds
        )
        ref_s, ref_n = timed(
            lambda h=history: reference(counter, instruction, summary, h, text, args.budget),
            args.min_seconds,
            max_runs=200,
        )
        assert ours_n == ref_n, f"both windows must pick the same turns ({ours_n} vs {ref_n})"
        print(f"{size:>6} {ours_s * 1e6:>10.1f} {ref_s * 1e6:>14.1f} {ref_s / ours_s:>7.0f}x {ours_n // 2:>10}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
