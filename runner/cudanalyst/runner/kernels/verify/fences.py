"""Fences: what a candidate can write is bounded, and the harness's own device data is proved intact.

Candidates share a CUDA context with the harness (one per worker). A kernel can write any mapped address
of that context, so two defences stand between its writes and other programs' measurements:

- Guard regions. Each array a candidate is given sits between two guard regions filled with GUARD_WORD.
  After every launch (verification and timing) the audit kernel counts the guard words that changed and
  how far from the array the farthest one lies; a candidate that wrote there is refused (`compile`) with
  a reason naming the array and the distance. Where the driver offers virtual memory management, each
  array gets its own reserved range with unmapped pages around the mapped part (`VmmAllocator`): a write
  past the guard faults at once (an illegal address: the worker restarts, the candidate is refused). Where
  it does not, the guards are plain (PLAIN_GUARD_BYTES on each side of one allocation), and a write past
  them is left to the next defence. `fence_mode` says which is in force.
- Digests. The harness's device data that outlives a launch (the inputs kept to restore each trial, the
  expected outputs, the snapshots of a module's variables) is digested by the same audit launch after
  every candidate launch, with a key drawn per worker from the OS's randomness and passed as a kernel
  argument (a candidate cannot read another kernel's arguments, so it cannot forge a change that keeps
  the digest). The first launch after which a digest differs names the culprit; the data is rebuilt from
  the host and the programs timed beside the culprit are timed again without it, so they are never charged.

The audit's results go to a slot zeroed right before the audit and copied to the host right after it, so
no later launch can change what an earlier audit found (the checker's counts travel the same way).

The layout arithmetic and the reading of an audit's results are pure functions (unit-tested without a GPU);
the allocators and `Auditor` need a CUDA context.
"""

from __future__ import annotations

import ctypes
import secrets
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

GUARD_WORD = 0x5EA1ED5E  # not a NaN in float32 nor in either half of a float64: an honest value rarely equals it
PLAIN_GUARD_BYTES = 64 << 10  # each side, when the guards are plain
VMM_MIN_FRONT_BYTES = 64 << 10  # the mapped guard before an array; the rest of the granule lies after it
MAX_REGIONS = 24  # regions per audit launch (their table travels as the kernel's argument)
REGION_WORDS = 4  # u64 per audited region: changed words, ~min index, max index + 1, digest
GUARD, DIGEST = 0, 1
AUDIT_THREADS = 256
AUDIT_BLOCKS = 264  # per region: two per SM of an H200, enough to read a digest's region at full bandwidth

AUDIT_SOURCE = r"""
#define MAX_REGIONS 24
struct Regions {
    unsigned long long ptr[MAX_REGIONS];    // first 32-bit word of the region
    unsigned long long words[MAX_REGIONS];  // its length in 32-bit words
    unsigned long long kind[MAX_REGIONS];   // 0: a guard (count words != guard), 1: a keyed digest
};

__device__ __forceinline__ unsigned long long mix64(unsigned long long z) {  // splitmix64's finalizer
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

// One block row per region (blockIdx.y). out[4 * region + 0..3]: words that differ from the guard, the
// complement of the lowest such index (0: none), the highest such index + 1 (0: none), and the digest:
// the sum of mix64(word ^ key ^ index * odd) over the region. The slot is zeroed before each audit.
extern "C" __global__ void audit(const Regions r, unsigned int guard, unsigned long long key,
                                 unsigned int count, unsigned long long* out) {
    unsigned int region = blockIdx.y;
    if (region >= count) return;
    const unsigned int* p = (const unsigned int*)r.ptr[region];
    unsigned long long n = r.words[region];
    unsigned long long* o = out + 4 * region;
    unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    unsigned long long i0 = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (r.kind[region] == 0) {
        unsigned long long changed = 0, lo = 0, hi = 0;
        for (unsigned long long i = i0; i < n; i += stride) {
            if (p[i] != guard) {
                if (changed == 0) lo = ~i;
                changed++;
                hi = i + 1;
            }
        }
        if (changed) {
            atomicAdd(&o[0], changed);
            atomicMax(&o[1], lo);
            atomicMax(&o[2], hi);
        }
    } else {
        unsigned long long h = 0;
        for (unsigned long long i = i0; i < n; i += stride)
            h += mix64((unsigned long long)p[i] ^ key ^ (i * 0x9E3779B97F4A7C15ULL));
        for (int d = 16; d > 0; d >>= 1) h += __shfl_down_sync(0xffffffffu, h, d);
        if ((threadIdx.x & 31) == 0 && h) atomicAdd(&o[3], h);
    }
}
"""


# ---- layout (pure) -----------------------------------------------------------------------------------


def round_up(n: int, to: int) -> int:
    return -(-int(n) // int(to)) * int(to)


@dataclass(frozen=True)
class Layout:
    """Where an array lies in its allocation: `front` guard bytes, the array (`size`, padded to whole
    words), `back` guard bytes. `gap`: unmapped bytes reserved on each side (0 for plain guards)."""

    front: int
    size: int
    back: int
    gap: int = 0

    @property
    def mapped(self) -> int:
        return self.front + self.size + self.back

    @property
    def reserved(self) -> int:
        return self.gap + self.mapped + self.gap


def plain_layout(nbytes: int, guard: int = PLAIN_GUARD_BYTES) -> Layout:
    """One allocation: guard, array, guard (the array 256-byte aligned, as cudaMalloc's are)."""
    return Layout(front=round_up(guard, 256), size=round_up(max(4, nbytes), 256), back=round_up(guard, 256))


def vmm_layout(nbytes: int, granularity: int, front: int = VMM_MIN_FRONT_BYTES) -> Layout:
    """The mapped part a whole number of granules; the array after a `front` guard, the rest of the last
    granule its back guard (at least `front` bytes); an unmapped granule reserved on each side."""
    size = round_up(max(4, nbytes), 256)
    front = round_up(front, 256)
    mapped = round_up(front + size + front, granularity)
    return Layout(front=front, size=size, back=mapped - front - size, gap=round_up(granularity, granularity))


# ---- regions and their findings (pure) ------------------------------------------------------------


@dataclass(frozen=True)
class Region:
    """A range an audit reads: a guard of `array` (`side` "before" / "after") or harness data (`what`)."""

    ptr: int
    words: int
    kind: int  # GUARD or DIGEST
    array: str = ""
    side: str = ""
    what: str = ""


def guard_regions(name: str, start: int, layout: Layout) -> list[Region]:
    """The two guards of an array that starts at device address `start`."""
    return [Region(start - layout.front, layout.front // 4, GUARD, name, "before"),
            Region(start + layout.size, layout.back // 4, GUARD, name, "after")]


def breach(region: Region, changed: int, lo_complement: int, hi: int, nbytes: int | None = None) -> str:
    """What a guard's counts say, in words a user reads: the array, the side, how far out (pure)."""
    lo = (~int(lo_complement)) & ((1 << 64) - 1)
    if region.side == "before":
        far = (region.words - lo) * 4  # bytes before the array's first byte
        where = f"up to {far} bytes before its start"
    else:
        far = int(hi) * 4  # bytes past the end of the padded array
        pad = f" (its data ends {nbytes} bytes in)" if nbytes is not None else ""
        where = f"up to {far} bytes past its end{pad}"
    return f"wrote outside its arrays: {int(changed)} words of the guard {region.side} array {region.array}, {where}"


@dataclass
class Findings:
    """What one audit found: guard breaches (reasons) and harness regions whose digest changed."""

    breaches: list[str] = field(default_factory=list)
    corrupted: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.breaches or self.corrupted)

    def reason(self) -> str:
        parts = list(self.breaches)
        if self.corrupted:
            parts.append("wrote outside its arrays into the harness's own data ("
                         + ", ".join(self.corrupted) + ")")
        return "; ".join(parts)


def read_findings(regions: Sequence[Region], results: np.ndarray, expected: dict[int, int],
                  sizes: dict[str, int] | None = None) -> Findings:
    """Findings from one audit's results (rows of REGION_WORDS, one per region, in `regions`' order);
    `expected`: region index -> digest it must have (pure)."""
    out = Findings()
    rows = np.asarray(results, dtype=np.uint64).reshape(-1, REGION_WORDS)
    for i, region in enumerate(regions):
        changed, lo, hi, digest = (int(x) for x in rows[i])
        if region.kind == GUARD and changed:
            out.breaches.append(breach(region, changed, lo, hi, (sizes or {}).get(region.array)))
        elif region.kind == DIGEST and i in expected and digest != expected[i]:
            out.corrupted.append(region.what)
    return out


def digest_host(words: np.ndarray, key: int) -> int:
    """The audit kernel's digest computed on the host (for tests; the kernel's sum is order-free)."""
    w = np.ascontiguousarray(words).view(np.uint32).astype(np.uint64)
    m = np.uint64((1 << 64) - 1)
    with np.errstate(over="ignore"):
        i = np.arange(w.size, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)
        z = w ^ np.uint64(key) ^ i
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
        return int(np.sum(z & m, dtype=np.uint64))


def chunks(regions: Sequence[Region], size: int = MAX_REGIONS) -> list[list[Region]]:
    return [list(regions[i:i + size]) for i in range(0, len(regions), size)] or [[]]


def pack_table(regions: Sequence[Region]) -> np.ndarray:
    """The kernel's `Regions` argument: ptr[], words[], kind[] (MAX_REGIONS each, zero-padded; pure)."""
    if len(regions) > MAX_REGIONS:
        raise ValueError(f"at most {MAX_REGIONS} regions per audit, got {len(regions)}")
    table = np.zeros((3, MAX_REGIONS), dtype=np.uint64)
    for i, r in enumerate(regions):
        table[:, i] = (r.ptr, r.words, r.kind)
    return table


# ---- allocation (needs a CUDA context) ---------------------------------------------------------------


class _CUmemLocation(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]


class _CUmemAllocFlags(ctypes.Structure):
    _fields_ = [("compressionType", ctypes.c_ubyte), ("gpuDirectRDMACapable", ctypes.c_ubyte),
                ("usage", ctypes.c_ushort), ("reserved", ctypes.c_ubyte * 4)]


class _CUmemAllocationProp(ctypes.Structure):  # cuda.h: 32 bytes, location at 8, allocFlags at 24
    _fields_ = [("type", ctypes.c_int), ("requestedHandleTypes", ctypes.c_int), ("location", _CUmemLocation),
                ("win32HandleMetaData", ctypes.c_void_p), ("allocFlags", _CUmemAllocFlags)]


class _CUmemAccessDesc(ctypes.Structure):  # cuda.h: 12 bytes, flags at 8
    _fields_ = [("location", _CUmemLocation), ("flags", ctypes.c_int)]


_PINNED, _LOCATION_DEVICE, _PROT_READWRITE, _GRANULARITY_MINIMUM = 1, 1, 3, 0


@dataclass
class Fenced:
    """One fenced array: its device address, layout and how to give it back."""

    ptr: int
    layout: Layout
    release: Any

    def __int__(self) -> int:
        return self.ptr


class PlainAllocator:
    """Guards inside one cuMemAlloc: a write past them lands wherever the driver put other memory."""

    mode = "guards"

    def __init__(self, cuda: Any) -> None:
        self.cuda = cuda

    def layout(self, nbytes: int) -> Layout:
        return plain_layout(nbytes)

    def alloc(self, nbytes: int) -> Fenced:
        layout = self.layout(nbytes)
        mem = self.cuda.mem_alloc(layout.mapped)
        return Fenced(int(mem) + layout.front, layout, mem.free)


class VmmAllocator:
    """Each array in its own reserved range, unmapped pages around the mapped part (cuMemAddressReserve,
    cuMemCreate, cuMemMap, cuMemSetAccess through ctypes: pycuda does not wrap them)."""

    mode = "vmm"

    def __init__(self, cuda: Any) -> None:
        self.plain = PlainAllocator(cuda)  # for an array the driver will not map (counted in `fallbacks`)
        self.fallbacks = 0
        lib = ctypes.CDLL("libcuda.so.1")
        u64, sz = ctypes.c_ulonglong, ctypes.c_size_t
        self._reserve = lib.cuMemAddressReserve
        self._reserve.argtypes = [ctypes.POINTER(u64), sz, sz, u64, u64]
        self._free_va = lib.cuMemAddressFree
        self._free_va.argtypes = [u64, sz]
        self._create = lib.cuMemCreate
        self._create.argtypes = [ctypes.POINTER(u64), sz, ctypes.POINTER(_CUmemAllocationProp), u64]
        self._release = lib.cuMemRelease
        self._release.argtypes = [u64]
        self._map = lib.cuMemMap
        self._map.argtypes = [u64, sz, sz, u64, u64]
        self._unmap = lib.cuMemUnmap
        self._unmap.argtypes = [u64, sz]
        self._access = lib.cuMemSetAccess
        self._access.argtypes = [u64, sz, ctypes.POINTER(_CUmemAccessDesc), sz]
        granularity = lib.cuMemGetAllocationGranularity
        granularity.argtypes = [ctypes.POINTER(sz), ctypes.POINTER(_CUmemAllocationProp), ctypes.c_int]
        get_device = lib.cuCtxGetDevice
        get_device.argtypes = [ctypes.POINTER(ctypes.c_int)]
        attribute = lib.cuDeviceGetAttribute
        attribute.argtypes = [ctypes.POINTER(ctypes.c_int), ctypes.c_int, ctypes.c_int]
        device = ctypes.c_int()
        self._check(get_device(ctypes.byref(device)), "cuCtxGetDevice")
        supported = ctypes.c_int()
        self._check(attribute(ctypes.byref(supported), 102, device), "cuDeviceGetAttribute")  # VMM supported
        if not supported.value:
            raise OSError("the device does not support virtual memory management")
        self.prop = _CUmemAllocationProp(type=_PINNED, location=_CUmemLocation(_LOCATION_DEVICE, device.value))
        self.access = _CUmemAccessDesc(location=_CUmemLocation(_LOCATION_DEVICE, device.value), flags=_PROT_READWRITE)
        g = ctypes.c_size_t()
        self._check(granularity(ctypes.byref(g), ctypes.byref(self.prop), _GRANULARITY_MINIMUM),
                    "cuMemGetAllocationGranularity")
        self.granularity = int(g.value)

    @staticmethod
    def _check(code: int, what: str) -> None:
        if code != 0:
            raise OSError(f"{what} failed with CUDA driver error {code}")

    def layout(self, nbytes: int) -> Layout:
        return vmm_layout(nbytes, self.granularity)

    def alloc(self, nbytes: int) -> Fenced:
        try:
            return self._alloc(nbytes)
        except OSError:
            self.fallbacks += 1
            return self.plain.alloc(nbytes)

    def _alloc(self, nbytes: int) -> Fenced:
        layout = self.layout(nbytes)
        base = ctypes.c_ulonglong()
        self._check(self._reserve(ctypes.byref(base), layout.reserved, self.granularity, 0, 0), "cuMemAddressReserve")
        handle = ctypes.c_ulonglong()
        mapped_at = base.value + layout.gap
        steps: list[Any] = [lambda: self._free_va(base.value, layout.reserved)]
        try:
            self._check(self._create(ctypes.byref(handle), layout.mapped, ctypes.byref(self.prop), 0), "cuMemCreate")
            steps.append(lambda: self._release(handle.value))
            self._check(self._map(mapped_at, layout.mapped, 0, handle.value, 0), "cuMemMap")
            steps.append(lambda: self._unmap(mapped_at, layout.mapped))
            self._check(self._access(mapped_at, layout.mapped, ctypes.byref(self.access), 1), "cuMemSetAccess")
        except BaseException:
            for undo in reversed(steps):
                undo()
            raise

        def release() -> None:
            for undo in reversed(steps):
                undo()

        return Fenced(mapped_at + layout.front, layout, release)


def allocator(cuda: Any, prefer_vmm: bool = True) -> PlainAllocator | VmmAllocator:
    """Unmapped pages around each array where the driver allows, else plain guards (see `mode`)."""
    if prefer_vmm:
        try:
            return VmmAllocator(cuda)
        except (OSError, AttributeError):
            pass
    return PlainAllocator(cuda)


class FencedArrays:
    """A task's candidate-visible arrays, each fenced, guards poisoned; reused by every candidate of the task
    (each run restores the inputs and poisons outputs and temps, so nothing of one candidate reaches the next)."""

    def __init__(self, cuda: Any, alloc: PlainAllocator | VmmAllocator, sizes: dict[str, int],
                 owner: str = "") -> None:
        self.cuda, self.sizes, self.owner = cuda, dict(sizes), owner
        self.arrays: dict[str, Fenced] = {}
        try:
            for name, nbytes in sizes.items():
                self.arrays[name] = alloc.alloc(nbytes)
        except BaseException:
            self.free()
            raise
        self.device = {name: f.ptr for name, f in self.arrays.items()}
        self.guards = [g for name, f in self.arrays.items() for g in guard_regions(name, f.ptr, f.layout)]
        self.poison()

    def poison(self, stream: Any | None = None) -> None:
        for g in self.guards:
            if stream is None:
                self.cuda.memset_d32(g.ptr, GUARD_WORD, g.words)
            else:
                self.cuda.memset_d32_async(g.ptr, GUARD_WORD, g.words, stream)

    def free(self) -> None:
        for f in self.arrays.values():
            f.release()
        self.arrays.clear()


class Auditor:
    """Launches the audit kernel over regions, into a device slot zeroed first and copied out right after."""

    def __init__(self, cuda: Any, module: Any, key: int | None = None) -> None:
        self.cuda = cuda
        self.module = module  # held: the session's module cache may drop it, and the function dies with it
        self.function = module.get_function("audit")
        # The Regions struct by value: 3 x MAX_REGIONS u64, then guard, key, count and the output pointer.
        self.function.prepare(f"{3 * MAX_REGIONS}QIQIP")
        self.key = secrets.randbits(64) if key is None else key
        self.slot = cuda.mem_alloc(MAX_REGIONS * REGION_WORDS * 8)

    def launch(self, regions: Sequence[Region], host: np.ndarray, stream: Any) -> None:
        """Audit `regions` (any number) into `host` (page-locked, len(regions) x REGION_WORDS u64, the
        caller synchronizes `stream` before reading it)."""
        rows = host.reshape(-1, REGION_WORDS)
        for c, part in enumerate(chunks(regions)):
            if not part:
                return
            self.cuda.memset_d32_async(self.slot, 0, len(part) * REGION_WORDS * 2, stream)
            table = pack_table(part).reshape(-1)
            self.function.prepared_async_call((AUDIT_BLOCKS, len(part), 1), (AUDIT_THREADS, 1, 1), stream,
                                              *(int(x) for x in table), GUARD_WORD, self.key, len(part),
                                              self.slot)
            start = c * MAX_REGIONS
            self.cuda.memcpy_dtoh_async(rows[start:start + len(part)], self.slot, stream)

    def digests(self, regions: Sequence[Region], stream: Any) -> dict[int, int]:
        """The digests `regions` have now (trusted: taken before any candidate ran on them)."""
        host = self.cuda.pagelocked_zeros((max(1, len(regions)), REGION_WORDS), dtype=np.uint64)
        self.launch(regions, host, stream)
        stream.synchronize()
        return {i: int(host[i, 3]) for i, r in enumerate(regions) if r.kind == DIGEST}

    def free(self) -> None:
        self.slot.free()
