"""Prompt tokens and input cost of a 10-turn support chat with two photos: (A) this bot, the image part
on its turn only, a text note after it, plus one note call per photo; (B) image parts kept in the
history and resent every turn, as popular Telegram GPT bots do.

    .venv/bin/python -m benchmarks.media [--quick] [--out PATH]

The bot's own code builds A (turn_part, stored_part, TurnWindow, ImageNotes); oldest whole turns go
when over budget. Caching by benchmarks.prompt_cost: an image is a run of one token id as long as its
tokens (tests.stubs.prompt_cache), so it counts in a cached prefix. Note output: OUTPUT_PRICE x input."""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Any, Final

from benchmarks.common import machine
from benchmarks.prompt_cost import RATIOS, CacheMeter
from prompts import default_registry
from services.core.errors import MessageTooLongError
from services.core.records import Completion, ImagePart, PromptPart, StoredMessage
from services.core.tokens import TokenCounter
from services.core.turn_media import TurnImage, TurnMedia
from services.engine.builders import IMAGE_NOTE_WORDS
from services.engine.turn_window import TurnWindow
from services.media.image_tokens import image_cost
from services.media.notes import ImageNotes
from services.media.prompt_parts import stored_part, turn_part
from services.memory.window import Window, build_window
from tests.stubs.prompt_cache import Content, Message, PromptTokens

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results" / "media.txt"
OUTPUT_PRICE: Final = 4
"""Output tokens cost this many input tokens (OpenAI's list prices of gpt-4o, gpt-4.1-mini, gpt-4o-mini)."""
CACHED_PRICE: Final = {"gpt-4o": 0.5, "gpt-4.1-mini": 0.25, "gpt-4o-mini": 0.5}
"""Cached input price / input price (OpenAI's list prices)."""
MODELS: Final = (("gpt-4o", "auto"), ("gpt-4.1-mini", "auto"), ("gpt-4o-mini", "auto"), ("gpt-4o-mini", "low"))
BUDGETS: Final = (6000, 20000)
STRATEGIES: Final = ("A notes (this bot)", "B keep image parts")


@dataclass(frozen=True)
class Photo:
    width: int
    height: int
    note: str
    """What the note call answers (about 30 words, the note prompt's limit)."""


@dataclass(frozen=True)
class Turn:
    user: str
    assistant: str
    photo: Photo | None = None


TURNS: Final = (
    Turn(
        "Hi, my order A-20931 arrived yesterday and the espresso machine inside looks damaged. What can I do?",
        "I'm sorry to hear that. Could you send a photo of the machine and of the box it came in? Please "
        "also tell me whether the outer packaging was already damaged when the courier handed it over.",
    ),
    Turn(
        "Here is the box and the machine. The left side panel is cracked, the box was dented on delivery.",
        "Thank you, the photo shows clear transport damage: the crushed box corner matches the crack in the "
        "side panel. You can choose a free replacement or a full refund for order A-20931. Does the machine "
        "still switch on?",
        Photo(
            1280,
            960,
            "Cardboard box with a crushed top-left corner; beside it a silver espresso machine, model EM-450, "
            "with a 6 cm crack in the left side panel next to the water tank.",
        ),
    ),
    Turn(
        "I'd prefer a replacement. It does switch on, but I haven't made coffee with it yet.",
        "A replacement it is. A courier will collect the damaged machine and deliver the new one on the "
        "same visit, so you are never without one. Could you confirm the delivery address for the exchange?",
    ),
    Turn(
        "Same address as the order: 14 Linden Street, flat 3, Riverside, 40122.",
        "Thanks, 14 Linden Street, flat 3, Riverside, 40122 is confirmed. The exchange is booked for Friday "
        "between 9:00 and 13:00; the courier will call about 30 minutes before arriving.",
    ),
    Turn(
        "One more thing: this morning I tried it after all and the display showed an error and it stopped.",
        "Please don't use it further until the exchange. Could you send a photo of the display showing the "
        "error? The code helps our technicians check whether the replacement unit needs any extra test.",
    ),
    Turn(
        "This is what it shows now, the red light keeps blinking.",
        "Thank you. E07 means the machine detected no water flow, which fits the damage near the water tank "
        "in your first photo. I've added the error code and serial number to the exchange so the returned "
        "unit is inspected.",
        Photo(
            1600,
            1200,
            "Control panel display of the EM-450 showing error code E07 with a blinking red water-drop icon; "
            "the serial number label below the display reads SN 45-7781-2291.",
        ),
    ),
    Turn(
        "Will the replacement have the same issue? The machine is brand new.",
        "It shouldn't: E07 here comes from the crack next to the water tank, not from a fault of the model. "
        "The new unit is checked before dispatch, and it has the full two-year warranty from the exchange date.",
    ),
    Turn(
        "OK. Could the courier come on Saturday instead? I'm at work on Friday.",
        "Yes, I've moved the exchange to Saturday between 10:00 and 14:00 at 14 Linden Street. The courier "
        "will still call about 30 minutes before arriving.",
    ),
    Turn(
        "Do I need the original box for the pickup? It's crushed as you saw.",
        "No, the courier brings protective packaging for the damaged machine. Please remove the water tank "
        "and the drip tray and pack them alongside; you can keep or recycle the damaged box.",
    ),
    Turn(
        "Great, thanks. Please send me the confirmation by email too.",
        "Done: the confirmation of the exchange for order A-20931 (Saturday, 10:00-14:00, 14 Linden Street) "
        "is on its way to the email address on your account. Is there anything else I can help with?",
    ),
)


PHOTOS: Final = tuple(turn.photo for turn in TURNS if turn.photo is not None)


def image_id(image: ImagePart) -> int:
    """The token id an image stands as (as the stub model server does: from its bytes)."""
    return 2_000_000 + int.from_bytes(hashlib.blake2b(image.url.encode(), digest_size=3).digest())


def as_message(part: PromptPart) -> Message:
    content: Content = part.content
    if part.images:
        content = [part.content, *((image_id(image), image.tokens) for image in part.images)]
    return part.role, content


class NoteModel:
    """The note call's model: records the request and answers the photo's note."""

    def __init__(self) -> None:
        self.requests: list[tuple[PromptPart, ...]] = []
        self.answer = ""

    async def describe(self, messages: Sequence[PromptPart], *, max_tokens: int) -> Completion:
        self.requests.append(tuple(messages))
        return Completion(text=self.answer, finish_reason="stop", usage=None, model="m", seconds=0.0)

    async def chat(self, messages: Sequence[PromptPart], **_options: Any) -> Completion:
        raise NotImplementedError("only note calls go to this model")

    async def summarize(self, messages: Sequence[PromptPart], *, schema: dict[str, Any]) -> Completion:
        raise NotImplementedError("only note calls go to this model")

    async def close(self) -> None:
        return None


@dataclass
class Run:
    strategy: str
    model: str
    detail: str
    budget: int
    tokens: PromptTokens
    prompts: list[int] = field(default_factory=list)
    """Billed prompt tokens of each turn's chat request."""
    image_tokens: list[int] = field(default_factory=list)
    """The image tokens each chat prompt carries."""
    kept: list[int] = field(default_factory=list)
    """Earlier turns each prompt keeps."""
    sent_details: list[str] = field(default_factory=list)
    """The detail each photo went at on its turn."""
    photo_tokens: list[int] = field(default_factory=list)
    note_output: int = 0
    chat: CacheMeter = field(init=False)
    notes: CacheMeter = field(init=False)

    def __post_init__(self) -> None:
        self.chat = CacheMeter(self.tokens)
        self.notes = CacheMeter(self.tokens)

    def meter(self, window: Window) -> None:
        self.chat.add(as_message(part) for part in window.messages)
        self.prompts.append(self.chat.billed[-1])
        self.image_tokens.append(sum(image.tokens for part in window.messages for image in part.images))
        self.kept.append(window.context_history_messages // 2)

    def total(self, ratio: float) -> float:
        """Input cost in full-price input tokens: chat prompts and note calls (their output included)."""
        return self.chat.effective(ratio) + self.notes.effective(ratio) + self.note_output * OUTPUT_PRICE


def turn_media(turn: Turn, index: int, model: str, detail: str) -> TurnMedia | None:
    if turn.photo is None:
        return None
    photo, url = turn.photo, f"data:image/jpeg;base64,photo-{index}"
    full = ImagePart(url, detail, image_cost(photo.width, photo.height, model=model, detail=detail).tokens)
    low = ImagePart(url, "low", image_cost(photo.width, photo.height, model=model, detail="low").tokens)
    return TurnMedia(images=(TurnImage(full, low, f"photo-{index}"),))


def fit_keeping_images(
    counter: TokenCounter,
    instruction: PromptPart,
    history: list[PromptPart],
    turn: Turn,
    media: TurnMedia | None,
    budget: int,
) -> tuple[Window, PromptPart]:
    """B's window by the bot's rule: whole turns newest first (a kept image that leaves no room drops its
    turn and the older ones), the new photo at low detail when it does not fit at its own."""
    new = turn_part(counter, turn.user, media)
    for part in (new, turn_part(counter, turn.user, media, low=True)):
        try:
            window = build_window(instruction=instruction, context=[], history=history, new_message=part, budget=budget)
        except MessageTooLongError:
            if not new.images:
                raise
            continue
        return window, part
    raise MessageTooLongError(tokens=new.tokens, limit=budget)


def simulate(strategy: str, model: str, detail: str, budget: int, tokens: PromptTokens) -> Run:
    counter = TokenCounter.for_encoding()
    registry = default_registry()
    text = registry.get("support_chat").render(company="our company", handoff="", knowledge="")
    instruction = PromptPart("developer", text, counter.count_message("developer", text))
    note_model = NoteModel()
    notes = ImageNotes(
        llm=note_model,
        counter=counter,
        instruction=registry.get("image_note").render(max_words=str(IMAGE_NOTE_WORDS)),
        role="developer",
    )
    run = Run(strategy, model, detail, budget, tokens)
    windows = TurnWindow(instruction=instruction, budget=budget, counter=counter)
    stored: list[StoredMessage] = []
    kept: list[PromptPart] = []
    for index, turn in enumerate(TURNS):
        media = turn_media(turn, index, model, detail)
        if strategy.startswith("A"):
            window, sent = windows.fitting(None, tuple(stored), turn_part(counter, turn.user, media), turn.user, media)
        else:
            window, sent = fit_keeping_images(counter, instruction, kept, turn, media, budget)
        run.meter(window)
        run.sent_details += [image.detail for image in sent.images]
        run.photo_tokens += [image.tokens for image in sent.images]
        reply = PromptPart("assistant", turn.assistant, counter.count_message("assistant", turn.assistant))
        if strategy.startswith("A"):
            written: tuple[str, ...] = ()
            if media is not None and turn.photo is not None:
                note_model.answer = f"1: {turn.photo.note}"
                written = asyncio.run(notes.describe(1, media.images, sent.images, turn.user))
                run.notes.add(as_message(part) for part in note_model.requests[-1])
                run.note_output += counter.count_text(note_model.answer)
            part = stored_part(counter, turn.user, media, written)
            stored += [
                StoredMessage(2 * index, "user", part.content, part.tokens),
                StoredMessage(2 * index + 1, "assistant", reply.content, reply.tokens),
            ]
        else:
            kept += [sent, reply]
    return run


WIDTHS: Final = (20, 9, 6, 9, 7, 7, 8, 8, 9, 9, 9, 9)
HEADER: Final = ("strategy", "chat_in", "max", "image_in", "kept", "cached", "notes_in", "note_out")


def line(cells: Sequence[str]) -> str:
    first, *rest = cells
    return "  " + " ".join([f"{first:<{WIDTHS[0]}}", *(f"{c:>{w}}" for c, w in zip(rest, WIDTHS[1:], strict=False))])


def ratios_of(model: str) -> tuple[float, ...]:
    return (1.0, *RATIOS, CACHED_PRICE[model])


def row(run: Run) -> str:
    return line(
        [
            run.strategy,
            str(run.chat.total),
            str(max(run.prompts)),
            str(sum(run.image_tokens)),
            f"{run.kept[-1]}/{len(TURNS) - 1}",
            f"{run.chat.cached_share:.1%}",
            str(run.notes.total),
            str(run.note_output),
            *(f"{run.total(ratio):.0f}" for ratio in ratios_of(run.model)),
        ]
    )


def report(runs: dict[tuple[int, str, str, str], Run], budgets: Sequence[int]) -> list[str]:
    photos = ", ".join(f"{i + 1} ({t.photo.width}x{t.photo.height})" for i, t in enumerate(TURNS) if t.photo)
    lines = [
        f"{len(TURNS)} turns, photos on turns {photos}; prompts without summaries, oldest whole turns out over budget",
        f"chat_in: chat prompt tokens of the {len(TURNS)} turns; image_in: image tokens in them; kept: earlier turns "
        f"in the last prompt; notes: the note calls (input, output)",
        f"eff@r: input cost in full-price input tokens, cached x r + uncached, note calls included, their output at "
        f"{OUTPUT_PRICE}x; own: the model's cached-input price ratio",
        line([*HEADER, "eff@1.0", *(f"eff@{r}" for r in RATIOS), "eff@own"]),
    ]
    for budget in budgets:
        lines.append(f"budget {budget} (CHAT_INPUT_TOKEN_BUDGET)")
        for model, detail in MODELS:
            a, b = (runs[budget, model, detail, strategy] for strategy in STRATEGIES)
            sent = " + ".join(f"{t} ({d})" for t, d in zip(a.photo_tokens, a.sent_details, strict=True))
            asked = [image_cost(p.width, p.height, model=model, detail=detail).tokens for p in PHOTOS]
            fallback = ""
            if detail != "low" and "low" in a.sent_details:
                fallback = f"; at {detail} {' + '.join(map(str, asked))}: no room, sent at low as the bot does"
            lines.append(
                f"{model}, detail {detail}, own cached ratio {CACHED_PRICE[model]}: photos {sent} tokens{fallback}"
            )
            lines += [row(a), row(b)]
            ratios = [f"{b.total(r) / a.total(r):.2f}" for r in ratios_of(model)]
            lines.append(line(["B / A", f"{b.chat.total / a.chat.total:.2f}", *[""] * 6, *ratios]))
    return lines


def commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    except OSError:
        return "unknown"
    return out.stdout.strip() or "unknown"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="budget 6000 only; writes no file unless --out")
    parser.add_argument("--out", default=None, help=f"write the table here too (default {RESULTS.relative_to(ROOT)})")
    args = parser.parse_args(argv)
    budgets = BUDGETS[:1] if args.quick else BUDGETS
    out = args.out if args.out is not None else ("" if args.quick else str(RESULTS))
    tokens = PromptTokens(TokenCounter.for_encoding())
    runs = {
        (budget, model, detail, strategy): simulate(strategy, model, detail, budget, tokens)
        for budget in budgets
        for model, detail in MODELS
        for strategy in STRATEGIES
    }
    lines = [
        f"# .venv/bin/python -m benchmarks.media{' --quick' if args.quick else ''}  ({commit()}, {date.today()})",
        f"machine: {machine()}",
        *report(runs, budgets),
    ]
    text = "\n".join(lines) + "\n"
    print(text, end="")
    if out:
        Path(out).write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
