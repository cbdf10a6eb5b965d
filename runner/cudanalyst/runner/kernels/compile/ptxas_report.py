"""Parse what nvcc prints: `ptxas -v` resource usage per kernel, and diagnostics with file and line.

Pure text functions, so they are tested on recorded output as well as on live compiles.
"""

from __future__ import annotations

import re
import struct

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel


class _Record(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, frozen=True)


class KernelResources(_Record):
    """ptxas's account of one entry function (`-Xptxas -v`)."""

    name: str
    arch: str = ""
    registers: int = 0
    shared_bytes: int = Field(0, description="static shared memory per block")
    local_bytes: int = Field(0, description="per-thread stack frame (local memory)")
    spill_store_bytes: int = 0
    spill_load_bytes: int = 0
    barriers: int = 0
    cumulative_stack_bytes: int = 0
    cmem: dict[int, int] = Field(
        default_factory=dict, description="constant bank -> bytes, when ptxas lists it"
    )

    @property
    def spills(self) -> bool:
        return self.spill_store_bytes > 0 or self.spill_load_bytes > 0


class Diagnostic(_Record):
    """One compiler message. `line` is in `file`; for the candidate, file is `candidate.cu`."""

    tool: str  # "nvcc" (front end), "host" (preprocessor / host compiler), "ptxas"
    severity: str  # error | warning | remark | note
    message: str
    file: str = ""
    line: int | None = None
    column: int | None = None
    code: str = ""  # e.g. "177-D" for front-end warnings
    excerpt: str = ""  # the source line and caret nvcc prints under the message

    def render(self) -> str:
        where = f"{self.file}:{self.line}" if self.line is not None else (self.file or self.tool)
        if self.column is not None:
            where += f":{self.column}"
        code = f" [{self.code}]" if self.code else ""
        return f"{where}: {self.severity}{code}: {self.message}"


_ENTRY = re.compile(r"^ptxas info\s*: Compiling entry function '(?P<name>[^']+)' for '(?P<arch>[^']+)'")
_PROPS = re.compile(r"^ptxas info\s*: Function properties for (?P<name>\S+)")
_FRAME = re.compile(
    r"(?P<stack>\d+) bytes stack frame, (?P<st>\d+) bytes spill stores, (?P<ld>\d+) bytes spill loads"
)
_USED = re.compile(r"^ptxas info\s*: Used (?P<regs>\d+) registers(?P<rest>.*)$")
_BARRIERS = re.compile(r"used (\d+) barriers")
_SMEM = re.compile(r"(\d+) bytes smem")
_CUMSTACK = re.compile(r"(\d+) bytes cumulative stack size")
_CMEM = re.compile(r"(\d+) bytes cmem\[(\d+)\]")


def parse_ptxas(text: str) -> dict[str, KernelResources]:
    """Resource usage per entry function, from `ptxas -v` output (any surrounding text is ignored)."""
    found: dict[str, dict[str, object]] = {}
    current: str | None = None  # entry whose "Used ..." line comes next
    props_for: str | None = None  # function whose stack-frame line comes next
    for raw in text.splitlines():
        line = raw.strip()
        if m := _ENTRY.match(line):
            current = m["name"]
            found.setdefault(current, {"name": current, "arch": m["arch"]})
        elif m := _PROPS.match(line):
            props_for = m["name"]
        elif (m := _FRAME.search(line)) and props_for is not None:
            if props_for in found:
                found[props_for].update(
                    local_bytes=int(m["stack"]), spill_store_bytes=int(m["st"]), spill_load_bytes=int(m["ld"])
                )
            props_for = None
        elif (m := _USED.match(line)) and current is not None:
            rest = m["rest"]
            fields: dict[str, object] = {"registers": int(m["regs"])}
            if b := _BARRIERS.search(rest):
                fields["barriers"] = int(b[1])
            if s := _SMEM.search(rest):
                fields["shared_bytes"] = int(s[1])
            if c := _CUMSTACK.search(rest):
                fields["cumulative_stack_bytes"] = int(c[1])
            fields["cmem"] = {int(bank): int(size) for size, bank in _CMEM.findall(rest)}
            found[current].update(fields)
            current = None
    return {name: KernelResources.model_validate(v) for name, v in found.items()}


_FRONT = re.compile(
    r"^(?P<file>[^\s(][^(]*)\((?P<line>\d+)\): (?P<sev>catastrophic error|error|warning|remark)"
    r"(?: #(?P<code>[\w-]+))?: (?P<msg>.*)$"
)
_HOST = re.compile(
    r"^(?P<file>[^:\s][^:]*):(?P<line>\d+):(?:(?P<col>\d+):)? (?P<sev>fatal error|error|warning|note): (?P<msg>.*)$"
)
_PTXAS = re.compile(r"^ptxas (?P<sev>fatal|error|warning)\s*: (?P<msg>.*)$")
_NVCC_FATAL = re.compile(r"^nvcc (?P<sev>fatal|error|warning)\s*: (?P<msg>.*)$")


def _severity(word: str) -> str:
    return "error" if word in ("catastrophic error", "fatal error", "fatal") else word


def parse_diagnostics(text: str) -> list[Diagnostic]:
    """Every error / warning / remark in nvcc's output, with the excerpt lines that follow it."""
    out: list[Diagnostic] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        diag: Diagnostic | None = None
        if m := _FRONT.match(line):
            diag = Diagnostic(
                tool="nvcc",
                severity=_severity(m["sev"]),
                message=m["msg"].strip(),
                file=m["file"],
                line=int(m["line"]),
                code=m["code"] or "",
            )
        elif m := _HOST.match(line):
            diag = Diagnostic(
                tool="host",
                severity=_severity(m["sev"]),
                message=m["msg"].strip(),
                file=m["file"],
                line=int(m["line"]),
                column=int(m["col"]) if m["col"] else None,
            )
        elif m := _PTXAS.match(line):
            diag = Diagnostic(tool="ptxas", severity=_severity(m["sev"]), message=m["msg"].strip())
        elif m := _NVCC_FATAL.match(line):
            diag = Diagnostic(tool="nvcc", severity=_severity(m["sev"]), message=m["msg"].strip())
        i += 1
        if diag is None:
            continue
        # The front end and gcc print the offending line and a caret under the message.
        excerpt: list[str] = []
        while i < len(lines) and lines[i].startswith((" ", "\t")) and len(excerpt) < 4:
            if lines[i].strip():
                excerpt.append(lines[i].rstrip())
            i += 1
        out.append(diag.model_copy(update={"excerpt": "\n".join(excerpt)}))
    return out


def elf_section_sizes(blob: bytes, prefix: str) -> int:
    """Total size of the ELF64 sections whose name starts with `prefix` (0 if the blob is not ELF64)."""
    if len(blob) < 64 or blob[:4] != b"\x7fELF" or blob[4] != 2:
        return 0
    shoff = struct.unpack_from("<Q", blob, 0x28)[0]
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", blob, 0x3A)
    if shoff == 0 or shnum == 0 or shoff + shnum * shentsize > len(blob):
        return 0

    def header(k: int) -> tuple[int, int, int]:
        base = shoff + k * shentsize
        name, _type = struct.unpack_from("<II", blob, base)
        offset, size = struct.unpack_from("<QQ", blob, base + 0x18)
        return name, offset, size

    _, str_off, str_size = header(shstrndx)
    names = blob[str_off : str_off + str_size]
    total = 0
    for k in range(shnum):
        name_off, _, size = header(k)
        end = names.find(b"\0", name_off)
        name = names[name_off:end].decode("ascii", "replace")
        if name.startswith(prefix):
            total += size
    return total


def user_constant_bytes(cubin: bytes) -> int:
    """Bytes of `__constant__` data the module defines (bank 3: `.nv.constant3`); ptxas no longer prints it."""
    return elf_section_sizes(cubin, ".nv.constant3")
