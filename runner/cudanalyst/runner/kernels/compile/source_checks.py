"""Static checks of CUDA source text, for the analyzer's report.

Heuristics over the text (no parser): they look for the patterns an expert would point at first.
Each finding names the line in the candidate source. Checks:

- uncoalesced: an array index where the fast thread index (threadIdx.x, or a variable computed from
  it) is multiplied by a stride, so neighbouring threads of a warp touch addresses far apart;
- restrict: pointer parameters of a kernel without `__restrict__`;
- bank-conflict: a `__shared__` 4-byte array with a row length that is a multiple of 32, indexed in
  its first (row) subscript by the fast thread index: a column walk hitting one bank;
- divergence: a branch on the parity / remainder / bits of the fast thread index, which splits warps.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

CHECKS = ("uncoalesced", "restrict", "bank-conflict", "divergence")


@dataclass(frozen=True)
class Finding:
    check: str
    line: int
    message: str

    def render(self) -> str:
        return f"line {self.line}: [{self.check}] {self.message}"


def strip_comments(source: str) -> str:
    """Comments become spaces (newlines kept), so line numbers stay right."""

    def blank(m: re.Match[str]) -> str:
        return re.sub(r"[^\n]", " ", m.group(0))

    return re.sub(r"//[^\n]*|/\*.*?\*/", blank, source, flags=re.DOTALL)


def _line_of(text: str, pos: int) -> int:
    return text.count("\n", 0, pos) + 1


_DECL = re.compile(
    r"\b(?:const\s+)?(?:unsigned\s+int|unsigned|int|long|size_t|auto|uint32_t|int64_t|uint64_t)\s+"
    r"(?P<name>[A-Za-z_]\w*)\s*=\s*(?P<rhs>[^;]+);"
)
_TX = r"threadIdx\s*\.\s*x"


def fast_index_names(text: str) -> set[str]:
    """Variables that vary from lane to lane of a warp: computed from threadIdx.x (to a fixpoint).

    A value divided by something (`idx / N`) varies slowly across a warp, so it does not count.
    """
    names: set[str] = set()
    decls: list[tuple[str, str]] = []
    for m in _DECL.finditer(text):
        # `int y = a, x = b;` declares two names: split at top-level commas.
        parts, depth, start = [], 0, 0
        rhs = m["rhs"]
        for pos, ch in enumerate(rhs):
            depth += {"(": 1, "[": 1, ")": -1, "]": -1}.get(ch, 0)
            if ch == "," and depth == 0:
                parts.append(rhs[start:pos])
                start = pos + 1
        parts.append(rhs[start:])
        decls.append((m["name"], parts[0]))
        for part in parts[1:]:
            if more := re.match(r"\s*([A-Za-z_]\w*)\s*=(.*)", part, re.DOTALL):
                decls.append((more.group(1), more.group(2)))
    changed = True
    while changed:
        changed = False
        pattern = _fast_pattern(names)
        for name, rhs in decls:
            if name in names:
                continue
            hits = [m for m in re.finditer(pattern, rhs) if not re.match(r"\s*/", rhs[m.end() :])]
            if hits:
                names.add(name)
                changed = True
    return names


def _fast_pattern(names: set[str]) -> str:
    # (?<!\.): a variable named `x` must not match the `.x` of blockIdx.x
    alts = [_TX] + [rf"(?<![.\w]){re.escape(n)}\b" for n in sorted(names)]
    return "(?:" + "|".join(alts) + ")"


def _subscripts(text: str) -> list[tuple[str, int, list[str]]]:
    """(array name, position, [subscript expressions]) for every `name[...]...` with balanced brackets."""
    out: list[tuple[str, int, list[str]]] = []
    for m in re.finditer(r"\b([A-Za-z_]\w*)\s*\[", text):
        subs: list[str] = []
        pos = m.end() - 1
        while pos < len(text) and text[pos] == "[":
            depth, start = 0, pos
            while pos < len(text):
                if text[pos] == "[":
                    depth += 1
                elif text[pos] == "]":
                    depth -= 1
                    if depth == 0:
                        break
                pos += 1
            subs.append(text[start + 1 : pos])
            pos += 1
            while pos < len(text) and text[pos] in " \t":
                pos += 1
        out.append((m.group(1), m.start(), subs))
    return out


def check_uncoalesced(text: str, fast: set[str]) -> list[Finding]:
    fp = _fast_pattern(fast)
    term = r"(?:[A-Za-z_]\w*|\d+|\))"
    strided = re.compile(rf"{fp}\s*\*\s*(?:[A-Za-z_(]|\d)|{term}\s*\*\s*{fp}")
    shared = set(re.findall(r"__shared__[^;]*?\b([A-Za-z_]\w*)\s*\[", text))
    findings: list[Finding] = []
    seen: set[tuple[int, str]] = set()
    for name, pos, subs in _subscripts(text):
        if name in shared or name.startswith("LAUNCH_") or len(subs) != 1:
            continue
        index = re.sub(r"\*\s*1\b|\b1\s*\*", "", subs[0])  # a stride of 1 is no stride
        if strided.search(index) is None:
            continue
        line = _line_of(text, pos)
        if (line, name) in seen:
            continue
        seen.add((line, name))
        findings.append(
            Finding(
                "uncoalesced",
                line,
                f"{name}[{subs[0].strip()}]: the thread index along x is multiplied by a stride, so the "
                "threads of a warp read addresses far apart (uncoalesced global access); let threadIdx.x "
                "index the contiguous (last) dimension, or stage through shared memory",
            )
        )
    return findings


_KERNEL = re.compile(r"__global__\s+void\s+(?P<name>[A-Za-z_]\w*)\s*\((?P<params>[^)]*)\)")


def check_restrict(text: str) -> list[Finding]:
    findings: list[Finding] = []
    for m in _KERNEL.finditer(text):
        missing = [
            p.split("*")[-1].strip()
            for p in m["params"].split(",")
            if "*" in p and "__restrict__" not in p and "__restrict" not in p
        ]
        if missing:
            findings.append(
                Finding(
                    "restrict",
                    _line_of(text, m.start()),
                    f"kernel {m['name']}: pointer parameters without __restrict__: {', '.join(missing)}; the "
                    "compiler must assume they alias, which blocks read-only caching and reordering of loads",
                )
            )
    return findings


_SHARED_2D = re.compile(
    r"__shared__\s+(?:volatile\s+)?(?P<type>float|int|unsigned|unsigned\s+int)\s+(?P<name>[A-Za-z_]\w*)"
    r"\s*\[(?P<rows>[^\]]+)\]\s*\[(?P<cols>[^\]]+)\]"
)


def _eval_int(expr: str, macros: dict[str, int]) -> int | None:
    expr = expr.strip()
    for _ in range(4):  # macros defined in terms of macros
        expr = re.sub(r"\b[A-Za-z_]\w*\b", lambda m: str(macros.get(m.group(0), m.group(0))), expr)
    if not re.fullmatch(r"[\d\s+\-*/()%]+", expr):
        return None
    try:
        return int(eval(expr, {"__builtins__": {}}, {}))  # digits and operators only, checked above
    except (SyntaxError, ZeroDivisionError, ValueError):
        return None


def object_macros(text: str, sizes: dict[str, int] | None = None) -> dict[str, int]:
    """Integer-valued `#define NAME value` and `const int NAME = value;` in the source, plus the sizes."""
    macros = dict(sizes or {})
    for m in re.finditer(r"^\s*#\s*define\s+([A-Za-z_]\w*)\s+([^\n]+)$", text, re.MULTILINE):
        if (v := _eval_int(m.group(2), macros)) is not None:
            macros[m.group(1)] = v
    for m in re.finditer(r"\b(?:static\s+)?(?:constexpr|const)\s+int\s+([A-Za-z_]\w*)\s*=\s*([^;]+);", text):
        if (v := _eval_int(m.group(2), macros)) is not None:
            macros[m.group(1)] = v
    return macros


def check_bank_conflicts(text: str, fast: set[str], macros: dict[str, int]) -> list[Finding]:
    fp = re.compile(_fast_pattern(fast))
    tiles = {m["name"]: _eval_int(m["cols"], macros) for m in _SHARED_2D.finditer(text)}
    findings: list[Finding] = []
    for name, pos, subs in _subscripts(text):
        cols = tiles.get(name)
        if cols is None or cols % 32 != 0 or len(subs) != 2:
            continue
        if fp.search(subs[0]) and not fp.search(subs[1]):
            findings.append(
                Finding(
                    "bank-conflict",
                    _line_of(text, pos),
                    f"{name}[{subs[0].strip()}][{subs[1].strip()}]: shared tile with rows of {cols} 4-byte words "
                    "read down a column by consecutive threads: all lanes hit the same bank (up to 32-way "
                    f"conflict); pad the row, e.g. [{cols + 1}]",
                )
            )
    return findings


_BRANCH = re.compile(r"\b(?:if|while|switch)\s*\(")


def check_divergence(text: str, fast: set[str]) -> list[Finding]:
    fp = _fast_pattern(fast)
    amp = r"(?<!&)&(?!&)"  # a bit test, not the logical &&
    split = re.compile(rf"{fp}\s*(?:%|{amp})|(?:%|{amp})\s*{fp}|{fp}\s*>>\s*\d+\s*\)\s*{amp}")
    findings: list[Finding] = []
    for m in _BRANCH.finditer(text):
        depth, pos = 1, m.end()
        while pos < len(text) and depth:
            depth += {"(": 1, ")": -1}.get(text[pos], 0)
            pos += 1
        cond = text[m.end() : pos - 1]
        if split.search(cond):
            findings.append(
                Finding(
                    "divergence",
                    _line_of(text, m.start()),
                    f"branch on ({' '.join(cond.split())}): the condition alternates between neighbouring "
                    "threads, so every warp runs both paths; branch on warp-uniform values (threadIdx.x / 32)",
                )
            )
    return findings


_FUNCTION = re.compile(r"__(?:global|device)__[^;{]*?\)\s*\{")


def function_scopes(text: str) -> list[str]:
    """One copy of the text per function, everything outside it blanked (newlines kept, so positions
    and line numbers stay those of the whole source). Variable names are local to a function."""
    scopes: list[str] = []
    for m in _FUNCTION.finditer(text):
        depth, pos = 0, m.end() - 1
        while pos < len(text):
            depth += {"{": 1, "}": -1}.get(text[pos], 0)
            pos += 1
            if depth == 0:
                break
        start, end = m.start(), pos
        scopes.append(
            re.sub(r"[^\n]", " ", text[:start]) + text[start:end] + re.sub(r"[^\n]", " ", text[end:])
        )
    return scopes


def run_checks(source: str, sizes: dict[str, int] | None = None) -> list[Finding]:
    text = strip_comments(source)
    macros = object_macros(text, sizes)
    findings = check_restrict(text)
    # Shared tiles may be declared at file scope; their declarations must stay visible to each scope.
    tiles_decl = "\n".join(m.group(0) for m in _SHARED_2D.finditer(text))
    for scope in function_scopes(text):
        fast = fast_index_names(scope)
        findings += check_uncoalesced(scope, fast)
        findings += check_bank_conflicts(scope + "\n" + tiles_decl, fast, macros)
        findings += check_divergence(scope, fast)
    unique = {(f.line, f.check, f.message): f for f in findings}
    return sorted(unique.values(), key=lambda f: (f.line, f.check))
