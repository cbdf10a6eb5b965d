"""The definition of one kernel task: what a candidate must define and how the harness runs it.

Everything the GPU harness needs is here, with no GPU code (the operator imports the core):
ordered parameters, kernel names in launch order, sizes, a seeded input generator, a float64
numpy reference, tolerances, the contract text quoted to the model, and a baseline kernel.

The launch contract, in short (`Task.contract()` renders it exactly per task):

- The harness prepends `prelude()` (one `#define` per size, then `#line 1`, so compiler
  diagnostics keep the candidate's own line numbers) and compiles the source as is for sm_90.
- Every kernel of the task is `extern "C" __global__ void <name>(<the task's parameter list>)`:
  all kernels of a task take the same parameters, in the same order.
- Each kernel's launch configuration is `extern "C" __constant__ int LAUNCH_<name>[6] =
  {gridX, gridY, gridZ, blockX, blockY, blockZ};`, read by the harness from the module's globals.
  No dynamic shared memory (static `__shared__` arrays only), default stream.
- The kernels are launched in the listed order; when the task has time steps (`repeat`), the
  whole sequence is launched `repeat` times, and a parameter of role `step` receives the step index.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum

import numpy as np


class Role(StrEnum):
    """How the harness treats one kernel parameter."""

    IN = "in"  # device array, filled from the inputs; must be unmodified after the run
    OUT = "out"  # device array, prefilled with NaN; compared with the reference
    INOUT = "inout"  # device array, filled from the inputs before each run; compared with the reference
    TEMP = "temp"  # device scratch array, prefilled with NaN; never compared
    SCALAR = "scalar"  # a value passed by value, taken from the inputs (a 0-d array)
    STEP = "step"  # an `int` passed by value: the time-step index 0..repeat-1 of this launch


ARRAY_ROLES = frozenset({Role.IN, Role.OUT, Role.INOUT, Role.TEMP})
OUTPUT_ROLES = frozenset({Role.OUT, Role.INOUT})

# numpy dtype name -> C type, for the parameter list of the contract.
C_TYPES: dict[str, str] = {"float32": "float", "float64": "double", "int32": "int"}


@dataclass(frozen=True)
class Tolerance:
    """Elementwise check |got - want| <= atol + rtol * |want| (numpy.isclose semantics)."""

    rtol: float
    atol: float


# Defaults per dtype; a task may carry its own, and the AttributionRun spec may override both.
DEFAULT_TOLERANCES: dict[str, Tolerance] = {
    "float32": Tolerance(rtol=1e-4, atol=1e-4),
    "float64": Tolerance(rtol=1e-9, atol=1e-9),
}


# The kinds of workload of the suite: the paper's suites (PolyBench-ACC, deep-learning operators in the
# style of KernelBench, XSBench, the NAS Parallel Benchmarks). `cudanalyst tasks` lists each task's family.
FAMILIES: dict[str, str] = {
    "polybench": "PolyBench/C 4.2 kernels (linear algebra, data mining, stencils)",
    "dl": "deep-learning operators in the style of KernelBench levels 1 and 2",
    "xsbench": "XSBench-style macroscopic cross-section lookups (binary search, irregular access)",
    "npb": "NAS Parallel Benchmarks kernels (CG's sparse matrix-vector product, MG's residual)",
}


def _dim_parts(dim: str) -> tuple[str, int]:
    """`"NROWS+1"` -> ("NROWS", 1); `"N"` -> ("N", 0). A dimension is a size, or a size plus a constant
    (CSR's row pointers have NROWS+1 entries); the C text is the same expression."""
    name, plus, extra = dim.partition("+")
    return name.strip(), int(extra) if plus else 0


def dim_value(sizes: Mapping[str, int], dim: str) -> int:
    name, extra = _dim_parts(dim)
    return int(sizes[name]) + extra


@dataclass(frozen=True)
class Param:
    """One kernel parameter. `shape` names sizes (e.g. ("NI", "NK")), or a size plus a constant
    ("NROWS+1"); empty for scalars and steps."""

    name: str
    role: Role
    shape: tuple[str, ...] = ()
    dtype: str = "float32"

    @property
    def is_array(self) -> bool:
        return self.role in ARRAY_ROLES

    def c_decl(self) -> str:
        """The declaration quoted in the contract, e.g. `const float* A` or `float alpha`."""
        if self.role is Role.STEP:
            return f"int {self.name}"
        ctype = C_TYPES[self.dtype]
        if self.role is Role.SCALAR:
            return f"{ctype} {self.name}"
        const = "const " if self.role is Role.IN else ""
        return f"{const}{ctype}* {self.name}"


@dataclass(frozen=True)
class Kernel:
    """One kernel of a task, in launch order, with the part of the computation it must do."""

    name: str
    does: str

    @property
    def launch_symbol(self) -> str:
        return f"LAUNCH_{self.name}"


InputMaker = Callable[[Mapping[str, int], np.random.Generator], dict[str, np.ndarray]]
Reference = Callable[[Mapping[str, int], Mapping[str, np.ndarray]], dict[str, np.ndarray]]


@dataclass(frozen=True)
class Task:
    """A task of the suite. Sizes are part of the value: `with_sizes` makes a smaller copy for tests."""

    name: str
    family: str  # the kind of workload (FAMILIES): polybench, dl, xsbench, npb
    summary: str  # one line: what the task computes, in math
    sizes: Mapping[str, int]
    params: tuple[Param, ...]
    kernels: tuple[Kernel, ...]
    baseline_source: str
    inputs_maker: InputMaker = field(repr=False)
    reference_fn: Reference = field(repr=False)
    dtype: str = "float32"
    repeat_size: str | None = None  # name of the size that counts time steps (e.g. "TSTEPS")
    tolerance_override: Tolerance | None = None
    layout_note: str = "arrays are dense and row-major: element [i][j] of X[R][C] is X[i * C + j]"

    def __post_init__(self) -> None:
        names = [p.name for p in self.params]
        if len(set(names)) != len(names):
            raise ValueError(f"task {self.name}: duplicate parameter names in {names}")
        if self.family not in FAMILIES:
            raise ValueError(f"task {self.name}: family {self.family!r} is not one of {sorted(FAMILIES)}")
        for p in self.params:
            unknown = [d for d in p.shape if _dim_parts(d)[0] not in self.sizes]
            if unknown:
                raise ValueError(f"task {self.name}: parameter {p.name} uses unknown sizes {unknown}")
        if self.repeat_size is not None and self.repeat_size not in self.sizes:
            raise ValueError(f"task {self.name}: repeat size {self.repeat_size} is not among the sizes")
        if not self.kernels:
            raise ValueError(f"task {self.name}: at least one kernel is required")

    # ---- shapes and roles -------------------------------------------------------------------

    @property
    def outputs(self) -> tuple[str, ...]:
        """Names of the parameters compared with the reference (roles out and inout)."""
        return tuple(p.name for p in self.params if p.role in OUTPUT_ROLES)

    @property
    def kernel_names(self) -> tuple[str, ...]:
        return tuple(k.name for k in self.kernels)

    @property
    def repeat(self) -> int:
        """How many times the whole kernel sequence is launched (1 without time steps)."""
        return 1 if self.repeat_size is None else int(self.sizes[self.repeat_size])

    def param(self, name: str) -> Param:
        for p in self.params:
            if p.name == name:
                return p
        raise KeyError(f"task {self.name} has no parameter {name!r}; it has {[p.name for p in self.params]}")

    def shape(self, name: str) -> tuple[int, ...]:
        """Concrete shape of a parameter under this task's sizes (() for scalars)."""
        return tuple(dim_value(self.sizes, d) for d in self.param(name).shape)

    def tolerance(self) -> Tolerance:
        return self.tolerance_override or DEFAULT_TOLERANCES[self.dtype]

    def with_sizes(self, **sizes: int) -> Task:
        """A copy with some sizes replaced (unknown names are an error, so typos do not pass)."""
        unknown = sorted(set(sizes) - set(self.sizes))
        if unknown:
            raise KeyError(f"task {self.name} has no sizes {unknown}; it has {sorted(self.sizes)}")
        bad = {k: v for k, v in sizes.items() if int(v) < 1}
        if bad:
            raise ValueError(f"task {self.name}: sizes must be >= 1, got {bad}")
        return dataclasses.replace(self, sizes={**self.sizes, **{k: int(v) for k, v in sizes.items()}})

    # ---- data ---------------------------------------------------------------------------------

    def make_inputs(self, seed: int) -> dict[str, np.ndarray]:
        """Inputs for every in / inout array and scalar, keyed by parameter name, in the task dtype.

        Scalars come as 0-d arrays. The same seed gives the same inputs.
        """
        rng = np.random.default_rng(seed)
        raw = self.inputs_maker(self.sizes, rng)
        out: dict[str, np.ndarray] = {}
        for p in self.params:
            if p.role in (Role.IN, Role.INOUT, Role.SCALAR):
                if p.name not in raw:
                    raise KeyError(f"task {self.name}: input maker gave no {p.name!r}")
                # np.array keeps 0-d scalars 0-d (ascontiguousarray would make them 1-d).
                arr = np.array(raw[p.name], dtype=p.dtype, order="C")
                if arr.shape != self.shape(p.name):
                    raise ValueError(
                        f"task {self.name}: input {p.name} has shape {arr.shape}, expected {self.shape(p.name)}"
                    )
                out[p.name] = arr
        return out

    def reference(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Expected outputs (keys = `outputs`), computed in float64 and cast to each output's dtype."""
        wide = {k: np.asarray(v, dtype=np.float64) for k, v in inputs.items()}
        got = self.reference_fn(self.sizes, wide)
        result: dict[str, np.ndarray] = {}
        for name in self.outputs:
            p = self.param(name)
            arr = np.array(got[name], dtype=p.dtype, order="C")
            if arr.shape != self.shape(name):
                raise ValueError(f"task {self.name}: reference {name} has shape {arr.shape}")
            result[name] = arr
        return result

    # ---- text for the compiler and the model -------------------------------------------------

    def prelude(self) -> str:
        """Lines the harness puts before the candidate source: the sizes, then `#line 1`."""
        lines = [f"#define {k} {int(v)}" for k, v in self.sizes.items()]
        lines.append('#line 1 "candidate.cu"')
        return "\n".join(lines) + "\n"

    def parameter_list(self) -> str:
        return ", ".join(p.c_decl() for p in self.params)

    def signature(self, kernel: str) -> str:
        return f'extern "C" __global__ void {kernel}({self.parameter_list()})'

    def contract(self) -> str:
        """The exact, short contract quoted to the model."""
        return render_contract(self)


# ---- the contract text: short and exact, because prompts quote it to the model


def _shape_text(task: Task, name: str) -> str:
    p = task.param(name)
    if not p.shape:
        return ""
    return "[" + "][".join(p.shape) + "]"


def _param_lines(task: Task) -> list[str]:
    roles = {
        Role.IN: "input, read only",
        Role.OUT: "output, filled with NaN before the run; write every element",
        Role.INOUT: "input and output",
        Role.TEMP: "scratch buffer for your own use, filled with NaN before the run",
        Role.SCALAR: "scalar",
        Role.STEP: f"time step index 0..{task.repeat_size}-1 of this launch",
    }
    return [f"  {p.name}{_shape_text(task, p.name)} {p.dtype}: {roles[p.role]}" for p in task.params]


def render_contract(task: Task) -> str:
    sizes = ", ".join(f"{k}={v}" for k, v in task.sizes.items())
    # The data dtype, then index dtypes where some arrays hold them ("float32, int32 index arrays").
    index_types = sorted({p.dtype for p in task.params if p.role is not Role.STEP} - {task.dtype})
    dtypes = task.dtype + "".join(f", {t} index arrays" for t in index_types)
    kernels = "\n".join(f"  {i}. {k.name}: {k.does}" for i, k in enumerate(task.kernels, start=1))
    sig = "\n".join(f"  {task.signature(k)}" for k in task.kernel_names)
    launch = "\n".join(
        f'  extern "C" __constant__ int LAUNCH_{k}[6] = {{gridX, gridY, gridZ, blockX, blockY, blockZ}};'
        for k in task.kernel_names
    )
    if task.repeat_size is None:
        order = "The harness launches the kernels once each, in this order, on the default stream:"
    else:
        order = (
            f"The harness launches the kernels in this order on the default stream, and repeats the whole "
            f"sequence {task.repeat_size} times:"
        )
    return "\n".join(
        [
            f"Task {task.name}: {task.summary}",
            f"Sizes (prepended as #define lines; use the names, not the numbers): {sizes}.",
            f"Parameters ({dtypes}; {task.layout_note}):",
            *_param_lines(task),
            order,
            kernels,
            "Your source must define exactly these kernels, each with this exact parameter list "
            "(you may add __restrict__ to pointers):",
            sig,
            "and each kernel's launch configuration as a constant array:",
            launch,
            "Grid and block sizes may use the size macros. Use static __shared__ arrays only (no dynamic "
            "shared memory), no streams, no host code, no main(). The source is compiled as is with nvcc "
            "for sm_90; you may write helper __device__ functions.",
        ]
    )
