"""Does a candidate source follow a task's contract? Text checks done before any GPU work, so a
missing kernel or a wrong signature becomes a clear reason in the outcome record, not an exception."""

from __future__ import annotations

import re

from cudanalyst.tasks.base import Param, Task

_QUALIFIERS = re.compile(r"\b(?:const|__restrict__|__restrict|restrict|volatile)\b")


def _normalise(decl: str) -> str:
    """`const float* __restrict__ A` -> `float*` (type only; qualifiers and the name dropped)."""
    text = _QUALIFIERS.sub(" ", decl)
    text = re.sub(r"\s*\*\s*", "* ", text).strip()
    words = text.split()
    if len(words) >= 2 and re.fullmatch(r"[A-Za-z_]\w*", words[-1]):
        words = words[:-1]  # the parameter name
    return " ".join(words).replace("* ", "*").replace(" *", "*")


def _expected_type(p: Param) -> str:
    return _normalise(p.c_decl())


def _strip_comments(source: str) -> str:
    return re.sub(r"//[^\n]*|/\*.*?\*/", " ", source, flags=re.DOTALL)


def contract_problems(task: Task, source: str) -> list[str]:
    """Every way `source` departs from the contract of `task` (empty when it conforms)."""
    text = _strip_comments(source)
    problems: list[str] = []
    if not text.strip():
        return ["the source is empty"]
    expected = [_expected_type(p) for p in task.params]
    for kernel in task.kernel_names:
        m = re.search(rf"__global__\s+void\s+{re.escape(kernel)}\s*\((?P<params>[^)]*)\)", text)
        if m is None:
            problems.append(f"kernel {kernel}: not defined (expected `{task.signature(kernel)}`)")
            continue
        prefix = text[max(0, m.start() - 40) : m.start()]
        in_block = re.search(r'extern\s+"C"\s*\{', text[: m.start()]) is not None  # extern "C" { ... }
        if not in_block and not re.search(r'extern\s+"C"', prefix):
            problems.append(f'kernel {kernel}: not declared extern "C" (its name would be mangled)')
        got_decls = [d for d in m["params"].split(",") if d.strip() and d.strip() != "void"]
        got = [_normalise(d) for d in got_decls]
        if got != expected:
            problems.append(
                f"kernel {kernel}: parameter types ({', '.join(got) or 'none'}) differ from the contract "
                f"({', '.join(expected)}); expected `{task.signature(kernel)}`"
            )
        if not re.search(rf"\bLAUNCH_{re.escape(kernel)}\s*\[\s*6?\s*\]\s*=\s*\{{", text):
            problems.append(
                f"kernel {kernel}: no launch configuration "
                f'(expected `extern "C" __constant__ int LAUNCH_{kernel}[6] = {{...}};`)'
            )
    if re.search(r"\bint\s+main\s*\(", text):
        problems.append("the source defines main(); the harness launches the kernels itself")
    return problems
