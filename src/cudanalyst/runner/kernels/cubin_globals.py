"""The module-scope variables a kernel can write, read from the cubin's ELF symbol table (pure).

A `__device__` variable keeps its value from one launch to the next for as long as the module stays
loaded, so a kernel can remember results, count its launches or keep a flag there. Timing resets every
such variable to its load-time value before each trial (timing.py); this module finds them. They live
in the sections `.nv.global` (no initializer) and `.nv.global.init` (with one). Constant, shared and
local memory do not outlive a launch in a way a kernel can write, so they are left alone.

A hand-written reader rather than pyelftools: the format part needed is 60 lines, and the GPU image
then needs no extra package.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

_ELF_MAGIC = b"\x7fELF"
_SHT_SYMTAB = 2
_STT_OBJECT = 1
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


def writable_variables(cubin: bytes) -> list[DeviceVariable]:
    """Every object symbol in a writable global section, in symbol-table order."""
    sections = _sections(cubin)
    shstrndx, = struct.unpack_from("<H", cubin, 0x3E)
    if shstrndx >= len(sections):
        raise CubinFormatError("section name table out of range")
    names = [_string(cubin, sections[shstrndx], s.name_offset) for s in sections]
    found = []
    for table in sections:
        if table.kind != _SHT_SYMTAB or table.entsize < 24 or table.link >= len(sections):
            continue
        strings = sections[table.link]
        for at in range(table.offset, table.offset + table.size - 23, table.entsize):
            st_name, st_info, _other, st_shndx, _value, st_size = struct.unpack_from("<IBBHQQ", cubin, at)
            if st_info & 0xF != _STT_OBJECT or not 0 < st_shndx < len(sections):
                continue
            if names[st_shndx] in WRITABLE_SECTIONS:
                found.append(DeviceVariable(_string(cubin, strings, st_name), names[st_shndx], int(st_size)))
    return found
