"""Look-alikes of the characters our data fences are written with (the fence names' letters, "<",
"/", "\\", "-", "_"), so a model-readable look-alike tag is defused like the real one. Pure data
taken from Unicode's confusables.txt (no table read at run time); the cleaner applies NFKC and case
folding first, so fullwidth and mathematical forms need no entry."""

# Source: https://www.unicode.org/Public/security/14.0.0/confusables.txt (UTS #39, version 14.0.0):
# every line whose target is one of these characters, e.g. "043E ; 006F ; MA # ( о → o ) CYRILLIC
# SMALL LETTER O", "0049 ; 006C ; MA # ( I → l )", "2215 ; 002F ; MA # ( ∕ → / ) DIVISION SLASH".
# The letters are keyed by a source's NFKC form; sources whose NFKC form already case-folds to the
# target are left out.

from __future__ import annotations

import functools
import unicodedata

LETTER_LOOK_ALIKES: dict[str, str] = {
    "a": "\u0251\u0391\u03b1\u0410\u0430\u13aa\u15c5\u237a\ua4ee\U000102a0\U00016f40",
    "c": (
        "\u03a3\u03c2\u0421\u0441\u13df\u1d04\u2ca4\u2ca5\ua4da\uabaf\U000102a2\U00010302\U00010415"
        "\U0001043d\U0001051c\U000118e9\U000118f2\U0001f74c"
    ),
    "d": "\u0501\u13a0\u13e7\u146f\u15de\u15ea\ua4d2\ua4d3",
    "e": "\u0395\u0415\u0435\u04bd\u13ac\u212e\u22ff\u2d39\ua4f0\uab32\U00010286\U000118a6\U000118ae",
    "g": "\u018d\u0261\u050c\u0581\u13c0\u13f3\u1d83\ua4d6",
    "i": "\u0131\u0269\u026a\u03b9\u0456\u04cf\u13a5\u2373\ua647\uab75\U000118c3",
    "k": "\u039a\u041a\u13e6\u16d5\u2c94\ua4d7\U00010518",
    "l": (
        "\u0031\u0049\u007c\u0196\u01c0\u0399\u0406\u04c0\u05c0\u05d5\u05df\u0627\u0661\u06f1\u07ca\u13de"
        "\u14aa\u16c1\u2223\u23fd\u2502\u2c92\u2cd0\u2d4f\ua4e1\ua4f2\U0001028a\U00010309\U00010320"
        "\U0001041b\U00010526\U000118a3\U000118b2\U00016f16\U00016f28\U0001d22a\U0001e8c7"
    ),
    "m": "\u039c\u03fa\u041c\u13b7\u15f0\u16d6\u2c98\ua4df\U000102b0\U00010311",
    "n": "\u039d\u0578\u057c\u2c9a\ua4e0\U00010513",
    "o": (
        "\u0030\u039f\u03bf\u03c3\u041e\u043e\u0555\u0585\u05e1\u0647\u0665\u06be\u06c1\u06d5\u06f5\u07c0"
        "\u0966\u09e6\u0a66\u0ae6\u0b20\u0b66\u0be6\u0c02\u0c66\u0c82\u0ce6\u0d02\u0d20\u0d66\u0d82\u0e50"
        "\u0ed0\u101d\u1040\u10ff\u12d0\u1d0f\u1d11\u2c9e\u2c9f\u2d54\u3007\ua4f3\uab3d\U00010292"
        "\U000102ab\U00010404\U0001042c\U000104c2\U000104ea\U00010516\U000114d0\U000118b5\U000118c8"
        "\U000118d7\U000118e0"
    ),
    "p": "\u03a1\u03c1\u0420\u0440\u13e2\u146d\u2374\u2ca2\u2ca3\ua4d1\U00010295",
    "r": "\u01a6\u0433\u13a1\u13d2\u1587\u1d26\u2c85\ua4e3\uab47\uab48\uab81\U000104b4\U00016f35\U0001d216",
    "s": ("\u01bd\u0405\u0455\u054f\u13d5\u13da\ua4e2\ua731\uabaa\U00010296\U00010420\U00010448\U000118c1\U00016f3a"),
    "t": ("\u03a4\u0422\u13a2\u22a4\u27d9\u2ca6\ua4d4\U00010297\U000102b1\U00010315\U000118bc\U00016f0a\U0001f768"),
    "u": (
        "\u028b\u03c5\u054d\u057d\u1200\u144c\u1d1c\u222a\u22c3\ua4f4\ua79f\uab4e\uab52\U000104ce"
        "\U000104f6\U000118b8\U000118d8\U00016f42"
    ),
    "v": (
        "\u03bd\u0474\u0475\u05d8\u0667\u06f7\u13d9\u142f\u1d20\u2228\u22c1\u2d38\ua4e6\ua6df\uaba9"
        "\U0001051d\U00011706\U000118a0\U000118c0\U00016f08\U0001d20d"
    ),
    "w": (
        "\u026f\u0461\u051c\u051d\u0561\u13b3\u13d4\u1d21\ua4ea\uab83\U0001170a\U0001170e\U0001170f\U000118e6\U000118ef"
    ),
    "y": (
        "\u0263\u028f\u03a5\u03b3\u0423\u0443\u04ae\u04af\u10e7\u13a9\u13bd\u1d8c\u1eff\u2ca8\ua4ec\uab5a"
        "\U000102b2\U000118a4\U000118dc\U00016f43"
    ),
}
"""Target letter → the characters (NFKC forms) confusables.txt maps to it."""

LESS_THAN_LOOK_ALIKES = "\u2039\u276e\u02c2\U0001d236\u1438\u16b2"
"""confusables.txt's sources of "<" (U+FE64 and U+FF1C are "<" after NFKC)."""
OPENERS = frozenset("<\ufe64\uff1c\u3008\u2329\u27e8\u276c" + LESS_THAN_LOOK_ALIKES)
"""What a model may read as the "<" of a tag: "<", its NFKC and confusables.txt look-alikes, and the
angle brackets (CJK, mathematical, ornament)."""

SEPARATOR_LOOK_ALIKES = (
    "\u1735\u2041\u2215\u2044\u2571\u27cb\u29f8\U0001d23a\u31d3\u3033\u2cc6\u30ce\u4e3f\u2f03"  # "/"
    "\u2216\u27cd\u29f5\u29f9\U0001d20f\U0001d23b\u31d4\u4e36\u2f02"  # "\\"
    "\u2010\u2011\u2012\u2013\ufe58\u06d4\u2043\u02d7\u2212\u2796\u2cba\u2014\u2015"  # "-" (and two dashes)
    "\u07fa"  # "_"
)
"""confusables.txt's sources of "/", "\\", "-" and "_" (the fullwidth and small forms are these after
NFKC), plus the em dash and the horizontal bar."""

_SEPARATORS = frozenset("/\\_-" + SEPARATOR_LOOK_ALIKES)
_SKIPPED_CATEGORIES = frozenset({"Cf", "Mn", "Me", "Zs", "Zl", "Zp", "Cc"})
"""Format characters (zero-width, bidi controls, soft hyphen), combining marks, spaces, controls."""


def _targets() -> dict[str, str]:
    targets: dict[str, str] = {}
    for target, sources in LETTER_LOOK_ALIKES.items():
        for source in sources:
            targets[source] = targets.get(source, "") + target
    return targets


_TARGETS = _targets()


@functools.lru_cache(maxsize=4096)
def readings(ch: str) -> tuple[str, ...] | None:
    """What ``ch`` may be read as in a tag name: None when a model reads past it (separators and
    their look-alikes, spaces, invisible and combining characters); else the letters or digits it
    may stand for (its NFKC form case-folded, that without its accents: a precomposed "ö" is an "o",
    as "o" with a combining mark is, and the letters confusables.txt maps it to: a Cyrillic "о" is an
    "o", a capital "I" an "l", a "0" an "o"); () when it ends a name. Cached: a text
    repeats its characters, and a line of 100 kB of openers must stay cheap."""
    if ch in _SEPARATORS or unicodedata.category(ch) in _SKIPPED_CATEGORIES:
        return None
    normal = unicodedata.normalize("NFKC", ch)
    if normal and all(c in _SEPARATORS or c.isspace() for c in normal):
        return None
    folded = normal.casefold()
    bare = "".join(c for c in unicodedata.normalize("NFKD", folded) if not unicodedata.combining(c))
    ways = (folded, bare, *_TARGETS.get(normal, ""), *_TARGETS.get(folded, ""), *_TARGETS.get(bare, ""))
    return tuple(way for way in dict.fromkeys(ways) if way.isalnum())
