"""What a cubin's ELF symbol table says about state that outlives a launch (pure).

- Module-scope variables: a `__device__` variable keeps its value from one launch to the next for as
  long as the module stays loaded, so a kernel can remember results, count its launches or keep a flag
  there. Timing resets every such variable to its load-time value before each trial (timing.py); this
  module finds them. They live in the sections `.nv.global` (no initializer) and `.nv.global.init`
  (with one). Constant, shared and local memory do not outlive a launch in a way a kernel can write, so
  they are left alone.
- The device heap: memory from `malloc` (or `new`, or `__nv_aligned_device_malloc`) in a kernel belongs
  to the CUDA context, not to the module, so it outlives a launch, a module reset and a module reload; a
  block freed at the end of one launch comes back, contents and all, from the next launch's `malloc`.
  No reset can reach it, so the kernel stage refuses a cubin that calls it (`heap_calls`): the calls are
  undefined function symbols that the driver resolves at load.

A hand-written reader rather than pyelftools: the format part needed is 60 lines, and the GPU image
then needs no extra package.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

_ELF_MAGIC = b"\x7fELF"
_SHT_SYMTAB = 2
_STT_OBJECT = 1
_STT_FUNC = 2
_SHN_UNDEF = 0
_STO_ENTRY = 0x10  # st_other of a kernel's symbol (CUDA's ELF): cuobjdump prints it as STO_ENTRY
WRITABLE_SECTIONS = (".nv.global", ".nv.global.init")


class CubinFormatError(ValueError):
    """Not a 64-bit little-endian ELF cubin, or a truncated one."""


@dataclass(frozen=True)
class DeviceVariable:
    name: str
    section: str
    size: int


@dataclass(frozen=True)
class _Section:
    name_offset: int
    kind: int
    offset: int
    size: int
    link: int
    entsize: int


def _sections(blob: bytes) -> list[_Section]:
    if blob[:4] != _ELF_MAGIC or len(blob) < 64:
        raise CubinFormatError("not an ELF file")
    if blob[4] != 2 or blob[5] != 1:
        raise CubinFormatError("not a 64-bit little-endian ELF file")
    shoff, = struct.unpack_from("<Q", blob, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", blob, 0x3A)
    if shentsize < 64 or shoff + shnum * shentsize > len(blob):
        raise CubinFormatError("section headers out of range")
    out = []
    for i in range(shnum):
        name, kind, _flags, _addr, offset, size, link, _info, _align, entsize = struct.unpack_from(
            "<IIQQQQIIQQ", blob, shoff + i * shentsize)
        out.append(_Section(name, kind, offset, size, link, entsize))
    return out


def _string(blob: bytes, table: _Section, offset: int) -> str:
    start = table.offset + offset
    end = blob.find(b"\0", start, table.offset + table.size)
    if end < 0:
        raise CubinFormatError("unterminated string in a string table")
    return blob[start:end].decode("utf-8", errors="replace")


def _symbols(cubin: bytes) -> list[tuple[str, int, str | None, int]]:
    """Every symbol: (name, type, its section's name or None when undefined, size)."""
    return [(name, kind, section, size) for name, kind, section, size, _ in _symbols_other(cubin)]


def _symbols_other(cubin: bytes) -> list[tuple[str, int, str | None, int, int]]:
    """Every symbol: (name, type, its section's name or None when undefined, size, st_other)."""
    sections = _sections(cubin)
    shstrndx, = struct.unpack_from("<H", cubin, 0x3E)
    if shstrndx >= len(sections):
        raise CubinFormatError("section name table out of range")
    names = [_string(cubin, sections[shstrndx], s.name_offset) for s in sections]
    found: list[tuple[str, int, str | None, int, int]] = []
    for table in sections:
        if table.kind != _SHT_SYMTAB or table.entsize < 24 or table.link >= len(sections):
            continue
        strings = sections[table.link]
        for at in range(table.offset, table.offset + table.size - 23, table.entsize):
            st_name, st_info, other, st_shndx, _value, st_size = struct.unpack_from("<IBBHQQ", cubin, at)
            section = None if st_shndx == _SHN_UNDEF else names[st_shndx] if st_shndx < len(sections) else ""
            found.append((_string(cubin, strings, st_name), st_info & 0xF, section, int(st_size), other))
    return found


def writable_variables(cubin: bytes) -> list[DeviceVariable]:
    """Every object symbol in a writable global section, in symbol-table order."""
    return [DeviceVariable(name, section, size) for name, kind, section, size in _symbols(cubin)
            if kind == _STT_OBJECT and section in WRITABLE_SECTIONS]


def heap_calls(cubin: bytes) -> list[str]:
    """The device-heap functions the cubin calls (malloc, free, the aligned malloc's system call), sorted."""
    return sorted({name for name, kind, section, _ in _symbols(cubin)
                   if kind == _STT_FUNC and section is None and (name == "free" or "malloc" in name)})


def kernel_symbols(cubin: bytes) -> list[str]:
    """The kernels (entry functions) the cubin defines, by their symbol names, mangled or not: the function
    symbols marked STO_ENTRY (0x10 in st_other), as `cuobjdump -symbols` shows them; a device function that was
    not inlined is a function symbol without the mark."""
    return [name for name, kind, section, _, other in _symbols_other(cubin)
            if kind == _STT_FUNC and section is not None and other & _STO_ENTRY]


def entry_symbol(cubin: bytes, kernel: str) -> str | None:
    """The symbol to launch for the contract's kernel `kernel`: its own name, else the one C++ mangling of it.

    A kernel declared without extern "C" keeps its name inside the Itanium mangling `_Z<len><name><params>`;
    the tools (compute-sanitizer, Nsight Compute) still launch it by that name, while verification keeps
    refusing it (the contract asks for the plain name). None when neither is there, or the mangling is
    ambiguous (overloads)."""
    symbols = kernel_symbols(cubin)
    if kernel in symbols:
        return kernel
    prefix = f"_Z{len(kernel)}{kernel}"
    mangled = [s for s in symbols if s.startswith(prefix)]
    return mangled[0] if len(mangled) == 1 else None
