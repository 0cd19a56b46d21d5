"""What an image costs in prompt tokens, and the size to shrink it to, by OpenAI's published rules.

Two rules: the tile rule (fit 2048x2048, shortest side to 768, base + per-tile per 512-px tile; low
detail: base only, the model sees 512x512) and the patch rule (32-px patches capped at 1536 by the
published shrink, times a per-model multiplier). A model is matched by name; an unknown one gets the
largest count of every known rule (never under-counted); ``IMAGE_TOKENS_RULE`` may name a rule.
Pure arithmetic on sizes (no imaging library): exact integers and fractions, so no float edge cases.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Final, Literal, Protocol, cast

Detail = Literal["low", "high", "auto"]
DETAILS: Final = ("low", "high", "auto")

TILE_BOX: Final = 2048
"""A high-detail image is first scaled to fit in a square of this side."""
TILE_SHORT_SIDE: Final = 768
"""...then so that its shortest side is at most this long."""
TILE: Final = 512
LOW_BOX: Final = 512
"""A low-detail image is seen as fitting in this square."""
PATCH: Final = 32
PATCH_CAP: Final = 1536


@dataclass(frozen=True)
class ImageCost:
    """The prompt tokens of an image and the size (``width`` x ``height``) the model uses: shrinking
    the image to it before sending uploads no pixel the model throws away and costs the same."""

    tokens: int
    width: int
    height: int


class ImageRule(Protocol):
    @property
    def name(self) -> str: ...

    def cost(self, width: int, height: int, detail: Detail = "auto") -> ImageCost: ...


def _check(width: int, height: int, detail: str) -> None:
    for side in (width, height):
        if isinstance(side, bool) or not isinstance(side, int) or side <= 0:
            raise ValueError(f"an image size is two positive integers, not {width!r} x {height!r}")
    if detail not in DETAILS:
        raise ValueError(f"image detail is one of {', '.join(DETAILS)}, not {detail!r}")


def _ceil(value: Fraction) -> int:
    return math.ceil(value)


def _fit_box(width: int, height: int, box: int) -> tuple[Fraction, Fraction]:
    """Scaled to fit in a ``box`` square, aspect kept, never enlarged."""
    w, h = Fraction(width), Fraction(height)
    longest = max(w, h)
    if longest > box:
        w, h = w * box / longest, h * box / longest
    return w, h


@dataclass(frozen=True)
class TileRule:
    """Base tokens plus ``per_tile`` per 512-px tile of the image resized to 2048 / 768 (high and, as
    it may be, auto); base only at low detail. A fractional side is rounded up: never under-count."""

    base: int
    per_tile: int

    @property
    def name(self) -> str:
        return f"tile:{self.base}:{self.per_tile}"

    def cost(self, width: int, height: int, detail: Detail = "auto") -> ImageCost:
        _check(width, height, detail)
        if detail == "low":
            w, h = _fit_box(width, height, LOW_BOX)
            return ImageCost(self.base, _ceil(w), _ceil(h))
        w, h = _fit_box(width, height, TILE_BOX)
        shortest = min(w, h)
        if shortest > TILE_SHORT_SIDE:
            w, h = w * TILE_SHORT_SIDE / shortest, h * TILE_SHORT_SIDE / shortest
        sent_w, sent_h = _ceil(w), _ceil(h)
        tiles = -(-sent_w // TILE) * -(-sent_h // TILE)
        return ImageCost(self.base + self.per_tile * tiles, sent_w, sent_h)


@dataclass(frozen=True)
class PatchRule:
    """32-px patches, ``ceil(w/32) * ceil(h/32)``; over 1536 the image is shrunk as published: by
    ``sqrt(32*32*1536 / (w*h))``, then further so that the limiting side is a whole number of patches.
    Tokens are the patches times ``multiplier``, rounded up. Detail does not change the count."""

    multiplier: float
    cap: int = PATCH_CAP

    @property
    def name(self) -> str:
        return f"patch:{self.multiplier:g}"

    def patches(self, width: int, height: int) -> ImageCost:
        """The patch count (as ``tokens``) and the size the model covers with them."""
        _check(width, height, "auto")
        cols, rows = -(-width // PATCH), -(-height // PATCH)
        if cols * rows <= self.cap:
            return ImageCost(cols * rows, width, height)
        # floor(side * shrink / 32) = floor(sqrt(cap * side / other)) = isqrt(cap * side // other)
        fit_w, fit_h = math.isqrt(self.cap * width // height), math.isqrt(self.cap * height // width)
        if fit_w * height <= fit_h * width:  # the width's whole patches limit the further shrink
            return self._scaled(fit_w, width, height, transpose=False)
        return self._scaled(fit_h, height, width, transpose=True)

    def _scaled(self, whole: int, side: int, other: int, *, transpose: bool) -> ImageCost:
        if whole == 0:  # a sliver under one patch even when shrunk: the long side gets the cap
            long_patches = self.cap
            sent_long = long_patches * PATCH
            sent_short = max(1, _ceil(Fraction(side * sent_long, other)))
            cost = ImageCost(long_patches, sent_short, sent_long)
        else:
            scale = Fraction(whole * PATCH, side)  # the limiting side becomes exactly ``whole`` patches
            sent_other = _ceil(other * scale)
            cost = ImageCost(whole * -(-sent_other // PATCH), whole * PATCH, sent_other)
        return ImageCost(cost.tokens, cost.height, cost.width) if transpose else cost

    def cost(self, width: int, height: int, detail: Detail = "auto") -> ImageCost:
        _check(width, height, detail)
        covered = self.patches(width, height)
        tokens = _ceil(covered.tokens * Fraction(str(self.multiplier)))
        return ImageCost(tokens, covered.width, covered.height)


@dataclass(frozen=True)
class ConservativeRule:
    """For a model no rule is known for: the size the tile rule uses (OpenAI's high-resolution limit,
    768 short side), and the largest count any known rule gives the image or that size."""

    rules: tuple[ImageRule, ...]

    @property
    def name(self) -> str:
        return "default"

    def cost(self, width: int, height: int, detail: Detail = "auto") -> ImageCost:
        _check(width, height, detail)
        sent = TileRule(0, 0).cost(width, height, detail)
        tokens = max(
            max(rule.cost(width, height, detail).tokens, rule.cost(sent.width, sent.height, detail).tokens)
            for rule in self.rules
        )
        return ImageCost(tokens, sent.width, sent.height)


MODEL_RULES: Final[dict[str, ImageRule]] = {
    "gpt-4o": TileRule(85, 170),
    "chatgpt-4o": TileRule(85, 170),
    "gpt-4o-mini": TileRule(2833, 5667),
    "gpt-4.1": TileRule(85, 170),
    "gpt-4.5": TileRule(85, 170),
    "gpt-4-turbo": TileRule(85, 170),
    "gpt-5": TileRule(70, 140),
    "gpt-5-chat": TileRule(70, 140),
    "o1": TileRule(75, 150),
    "o3": TileRule(75, 150),
    "computer-use-preview": TileRule(65, 129),
    "gpt-4.1-mini": PatchRule(1.62),
    "gpt-4.1-nano": PatchRule(2.46),
    "gpt-5-mini": PatchRule(1.62),
    "gpt-5-nano": PatchRule(2.46),
    "o4-mini": PatchRule(1.72),
}
"""Model name prefix → its published rule (OpenAI's vision guide, "Calculating costs")."""

DEFAULT_RULE: Final = ConservativeRule(tuple(dict.fromkeys(MODEL_RULES.values())))


def known_rule(model: str) -> ImageRule | None:
    """The rule of the longest prefix the model's name starts with, the prefix ending the name or
    followed by ``-`` (``gpt-4o-2024-08-06`` is gpt-4o, ``gpt-5.4-mini`` is not gpt-5); a provider
    prefix such as ``openai/`` is ignored. None when no prefix matches."""
    name = model.strip().lower().rsplit("/", 1)[-1]
    for prefix in sorted(MODEL_RULES, key=len, reverse=True):
        if name == prefix or name.startswith(prefix + "-"):
            return MODEL_RULES[prefix]
    return None


def rule_for_model(model: str) -> ImageRule:
    return known_rule(model) or DEFAULT_RULE


def parse_rule(text: str) -> ImageRule:
    """An explicit rule (``IMAGE_TOKENS_RULE``): ``tile:BASE:PER_TILE``, ``patch:MULTIPLIER``,
    ``default`` (the conservative rule) or a known model's name. ValueError otherwise."""
    spec = text.strip().lower()
    kind, _, rest = spec.partition(":")
    if kind == "tile" and rest:
        parts = rest.split(":")
        if len(parts) == 2 and all(p.isdigit() for p in parts) and int(parts[1]) > 0:
            return TileRule(int(parts[0]), int(parts[1]))
        raise ValueError(f"a tile rule is tile:BASE:PER_TILE with whole numbers, not {text!r}")
    if kind == "patch" and rest:
        try:
            multiplier = float(rest)
        except ValueError:
            multiplier = math.nan
        if not (math.isfinite(multiplier) and multiplier > 0):
            raise ValueError(f"a patch rule is patch:MULTIPLIER with a positive number, not {text!r}")
        return PatchRule(multiplier)
    if spec == "default":
        return DEFAULT_RULE
    rule = known_rule(spec) if spec else None
    if rule is None:
        raise ValueError(f"{text!r} is no image-token rule (tile:B:T, patch:M, default) nor a known model")
    return rule


def resolve_rule(model: str, override: str | None = None) -> ImageRule:
    """The rule an override names, else the model's."""
    return parse_rule(override) if override else rule_for_model(model)


def image_cost(width: int, height: int, *, model: str, detail: str = "auto", rule: str | None = None) -> ImageCost:
    """The tokens of a ``width`` x ``height`` image sent to ``model`` and the size to send it at."""
    _check(width, height, detail)
    return resolve_rule(model, rule).cost(width, height, cast(Detail, detail))


def image_tokens(width: int, height: int, *, model: str, detail: str = "auto", rule: str | None = None) -> int:
    return image_cost(width, height, model=model, detail=detail, rule=rule).tokens
