"""CUDA source text compared as code: comments and whitespace do not count (pure).

The coder often returns the frozen program unchanged, sometimes re-indented or with a comment added.
Such a candidate is a copy, not a new program (an outcome record says so: `unchanged`), and a study
may leave copies out of the rates (`spec.attribution.unchanged: exclude`).
"""

from __future__ import annotations

import re

# String and character literals first, so a `//` or `/*` inside a literal is not taken for a comment.
_TOKENS = re.compile(r'"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'|//[^\n]*|/\*.*?(?:\*/|\Z)|\s+', re.DOTALL)


def code_text(source: str) -> str:
    """The source without comments and without whitespace, except one space between two word characters
    (so `unsigned int` and `unsignedint` stay apart, while `a+b` and `a + b` are the same). Whitespace in
    string literals is dropped too: kernels hardly have any, and a copy is what this is meant to find."""

    def keep(match: re.Match[str]) -> str:
        token = match.group(0)
        return " " if token.startswith(("//", "/*")) or token.isspace() else token

    text = _TOKENS.sub(keep, source)
    return _SPACE.sub(lambda m: " " if _between_words(text, m) else "", text)


_SPACE = re.compile(r"\s+")


def _between_words(text: str, match: re.Match[str]) -> bool:
    start, end = match.span()
    return start > 0 and end < len(text) and (text[start - 1].isalnum() or text[start - 1] == "_") and (
        text[end].isalnum() or text[end] == "_")


def same_code(a: str | None, b: str | None) -> bool:
    """Whether two sources are the same program up to whitespace and comments (False when either is None)."""
    if a is None or b is None:
        return False
    return code_text(a) == code_text(b)
