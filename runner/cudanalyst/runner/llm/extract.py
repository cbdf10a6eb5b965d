"""Kernel source from a model's completion.

Models wrap code in fences most of the time, but not always: some answer with several blocks (an
explanation snippet, then the kernel; or two versions, the last one meant), some forget the fences,
and a completion cut at maxTokens leaves a fence open. Every case gives either code or a reason, so
a unit with no usable code becomes an outcome `fail` with that reason instead of vanishing.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

Method = Literal["fenced", "unclosed-fence", "unfenced", "none"]

# Opening fence: ``` or ~~~ (3 or more), optional info string (language).
_FENCE_OPEN = re.compile(r"^(?P<indent>[ \t]{0,3})(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>[^\n`]*)$", re.MULTILINE)
CODE_LANGUAGES = frozenset({"", "cuda", "cu", "cpp", "c++", "cxx", "c", "cc", "h", "hpp", "cuh"})
KERNEL_MARKER = "__global__"


@dataclass(frozen=True)
class Block:
    """One fenced block: its language tag (lower case, may be empty) and body."""

    language: str
    code: str
    closed: bool


@dataclass(frozen=True)
class Extraction:
    """What was taken from a completion, and how; `code is None` means no usable code (see reason)."""

    code: str | None
    method: Method
    language: str = ""
    blocks: int = 0
    kernels: int = 0
    reason: str | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.code is not None


def fenced_blocks(text: str) -> list[Block]:
    """All fenced blocks in order; a final unclosed fence yields a block with closed=False."""
    blocks: list[Block] = []
    pos = 0
    while True:
        m = _FENCE_OPEN.search(text, pos)
        if m is None:
            return blocks
        fence = m.group("fence")
        info = m.group("info").strip().split()
        language = info[0].lower() if info else ""
        body_start = m.end() + 1
        # A closing fence: same character, at least as long, nothing else on the line (CommonMark).
        close = re.compile(rf"^[ \t]{{0,3}}{re.escape(fence[0])}{{{len(fence)},}}[ \t]*$", re.MULTILINE)
        c = close.search(text, body_start)
        if c is None:
            blocks.append(Block(language, text[body_start:].rstrip() + "\n" if body_start < len(text) else "", False))
            return blocks
        blocks.append(Block(language, text[body_start:c.start()], True))
        pos = c.end()


def _brace_balanced_end(text: str, start: int) -> int | None:
    """Index just past the brace that closes the first '{' at or after start (comments/strings skipped)."""
    depth = 0
    i = text.find("{", start)
    if i < 0:
        return None
    n = len(text)
    while i < n:
        ch = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
            continue
        if text.startswith("/*", i):
            j = text.find("*/", i + 2)
            i = n if j < 0 else j + 2
            continue
        if ch in "\"'":
            j = i + 1
            while j < n and text[j] != ch:
                j += 2 if text[j] == "\\" else 1
            i = j + 1
            continue
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return None


_CODE_STARTS = ("#", "//", "/*", "*", "template", "__", "static", "const", "extern", "using", "namespace",
                "struct", "typedef", "inline", "}", "{")


def _code_like(line: str) -> bool:
    """A line that belongs to C/CUDA source rather than to prose around it."""
    stripped = line.strip()
    if not stripped:
        return True
    return (stripped.startswith(_CODE_STARTS) or stripped.endswith((";", "{", "}", ")", ","))
            or line[:1] in (" ", "\t"))


def _unfenced_code(text: str) -> str | None:
    """Code written without fences: the contiguous code lines around the kernels, prose left out."""
    first = text.find(KERNEL_MARKER)
    if first < 0:
        return None
    # Back from the first kernel's line over code-like lines (includes, defines, helpers).
    start = text.rfind("\n", 0, first) + 1
    while start > 0:
        prev = text.rfind("\n", 0, start - 1) + 1
        if not _code_like(text[prev:start]):
            break
        start = prev
    # Forward to the end of the last kernel's body.
    end = None
    k = first
    while k >= 0:
        e = _brace_balanced_end(text, k)
        if e is None:
            break
        end = e
        k = text.find(KERNEL_MARKER, e)
    if end is None:
        return None
    # Then over trailing code lines (launch constants after the kernels), up to the first prose line.
    end = text.find("\n", end) + 1 if text.find("\n", end) >= 0 else len(text)
    while end < len(text):
        nxt = text.find("\n", end)
        line_end = len(text) if nxt < 0 else nxt + 1
        if not text[end:line_end].strip() or not _code_like(text[end:line_end]):
            break
        end = line_end
    return text[start:end].strip() + "\n"


def _defines(code: str, name: str) -> bool:
    return re.search(rf"{KERNEL_MARKER}[^;{{]*?\b{re.escape(name)}\s*\(", code) is not None


def _pick_blocks(code_blocks: list[Block], kernel_names: Sequence[str], notes: list[str]) -> list[int]:
    """Indices (in order) of the blocks that make up the candidate source."""
    kernel_idx = [i for i, b in enumerate(code_blocks) if KERNEL_MARKER in b.code]
    last = kernel_idx[-1]
    chosen = {last}
    missing = [n for n in kernel_names if not _defines(code_blocks[last].code, n)]
    for name in list(missing):
        # A task with several kernels: the model may write each in its own block.
        found = [i for i in kernel_idx if _defines(code_blocks[i].code, name)]
        if found:
            chosen.add(found[-1])
            missing.remove(name)
    if len(kernel_idx) > len(chosen):
        notes.append(f"{len(kernel_idx)} blocks define kernels; {len(chosen)} used (the latest per kernel)")
    if missing:
        notes.append(f"kernels not found: {', '.join(missing)}")
    first = min(chosen)
    # Blocks without kernels that hold device helpers (before) or launch constants (anywhere) belong too.
    for i, b in enumerate(code_blocks):
        if i in chosen or KERNEL_MARKER in b.code:
            continue
        if ("__device__" in b.code and i < first) or "LAUNCH_" in b.code:
            chosen.add(i)
            notes.append(f"helper block {i + 1} added")
    return sorted(chosen)


def extract_kernel(completion: str | None, kernel_names: Sequence[str] = ()) -> Extraction:
    """The kernel source a completion offers, or the reason there is none.

    Rules, in order: fenced blocks in a code language that define a kernel (`__global__`) win, the
    last one when there are several (models revise towards the end), plus earlier blocks when the last
    one lacks some of `kernel_names` (tasks with several kernels), plus helper blocks (device
    functions, launch constants). A fence left open (completion cut short) is used but noted. With
    no fences, the text from the first code line to the end of the last kernel.
    """
    if completion is None or not completion.strip():
        return Extraction(None, "none", reason="empty completion")
    blocks = fenced_blocks(completion)
    code_blocks = [b for b in blocks if b.language in CODE_LANGUAGES and b.code.strip()]
    notes: list[str] = []
    if any(KERNEL_MARKER in b.code for b in code_blocks):
        picked = [code_blocks[i] for i in _pick_blocks(code_blocks, kernel_names, notes)]
        closed = all(b.closed for b in picked)
        if not closed:
            notes.append("code fence not closed (completion cut short?)")
        code = "".join(b.code if b.code.endswith("\n") else b.code + "\n" for b in picked)
        return Extraction(
            code,
            "fenced" if closed else "unclosed-fence",
            language=next(b.language for b in reversed(picked) if KERNEL_MARKER in b.code),
            blocks=len(blocks),
            kernels=code.count(KERNEL_MARKER),
            notes=notes,
        )
    if blocks:
        # Fences, but none defines a kernel: maybe the model put the kernel outside them.
        loose = _unfenced_code(_strip_blocks(completion, blocks))
        if loose is not None:
            return Extraction(loose, "unfenced", blocks=len(blocks), kernels=loose.count(KERNEL_MARKER),
                              notes=["fenced blocks hold no kernel; code found outside fences"])
        langs = sorted({b.language or "(none)" for b in blocks})
        return Extraction(None, "none", blocks=len(blocks),
                          reason=f"{len(blocks)} fenced block(s) ({', '.join(langs)}) but none defines a "
                          f"{KERNEL_MARKER} kernel")
    loose = _unfenced_code(completion)
    if loose is not None:
        return Extraction(loose, "unfenced", kernels=loose.count(KERNEL_MARKER), notes=["no code fences"])
    if KERNEL_MARKER in completion:
        return Extraction(None, "none", reason=f"{KERNEL_MARKER} found but its body never closes")
    return Extraction(None, "none", reason=f"no code block and no {KERNEL_MARKER} kernel in the completion")


def _strip_blocks(text: str, blocks: list[Block]) -> str:
    for b in blocks:
        text = text.replace(b.code, "", 1)
    return text
