"""Writes the small OpenEvolve and LLM4AD/EoH fixture runs used by tests/test_import*.py.

The shapes follow the tools' own writers (OpenEvolve's ProgramDatabase.save and LLM4AD's
EoHProfiler): run `python tests/data/make_import_fixtures.py` to regenerate them.
"""

from __future__ import annotations

import json
from pathlib import Path

HERE = Path(__file__).parent
KERNEL = """__global__ void gemm(int ni, int nj, int nk, double alpha, double beta,
                     double *C, const double *A, const double *B) {{
  int i = blockIdx.y * blockDim.y + threadIdx.y, j = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < ni && j < nj) {{
    double acc = 0.0; // {note}
    for (int k = 0; k < nk; ++k) acc += A[i * nk + k] * B[k * nj + j];
    C[i * nj + j] = beta * C[i * nj + j] + alpha * acc;
  }}
}}
"""

IDS = {
    "root": "0b6f3c1e-7c1a-4c55-9d0e-1f2a3b4c5d60",
    "a": "1c7e4d2f-8d2b-4d66-8e1f-2a3b4c5d6e71",
    "b": "2d8f5e30-9e3c-4e77-9f20-3b4c5d6e7f82",
    "c": "3e906f41-af4d-4f88-a031-4c5d6e7f8093",
}


def program(key: str, parent: str | None, generation: int, iteration: int, metrics: dict, changes: str,
            artifacts: dict | None, prompt: bool) -> dict:
    return {
        "id": IDS[key],
        "code": KERNEL.format(note=f"variant {key}"),
        "changes_description": "",
        "language": "cuda",
        "parent_id": IDS[parent] if parent else None,
        "generation": generation,
        "timestamp": 1747000000.0 + iteration,
        "iteration_found": iteration,
        "metrics": metrics,
        "complexity": 0.0,
        "diversity": 0.0,
        "metadata": {"changes": changes, "island": 0, "parent_metrics": {}},
        "artifacts_json": json.dumps(artifacts) if artifacts else None,
        "artifact_dir": None,
        **({"prompts": {"diff_user": {
            "system": "You are an expert CUDA engineer.",
            "user": f"Improve the kernel (iteration {iteration}).",
            "responses": [f"<<<<<<< SEARCH ... >>>>>>> REPLACE ({key})"],
        }}} if prompt else {}),
    }


def openevolve() -> None:
    root = HERE / "openevolve" / "gemm" / "checkpoints"
    progs = {
        "root": program("root", None, 0, 0, {"compiled": 1.0, "correct": 1.0, "speedup": 1.0, "combined_score": 0.5},
                        "", None, False),
        "a": program("a", "root", 1, 3, {"compiled": 0.0, "correct": 0.0, "speedup": 0.0, "combined_score": 0.0},
                     "Change 1: tile the k loop in shared memory",
                     {"stderr": "gemm.cu(4): error: identifier \"tile\" is undefined",
                      "failure_stage": "compile"}, True),
        "b": program("b", "root", 1, 5, {"compiled": 1.0, "correct": 1.0, "speedup": 1.4, "combined_score": 0.8},
                     "Change 1: unroll the k loop by 4",
                     {"ptxas_info": "ptxas info : Used 40 registers, 0 bytes smem, 0 bytes spill stores",
                      "ncu_profile": "Memory Throughput 71.2%; Achieved Occupancy 48.1%",
                      "timing_ms": {"median": 0.81, "trials": 30},
                      "llm_notes": "unrolled", "blob": {"__bytes__": "AAEC"}}, True),
        "c": program("c", "b", 2, 9, {"compiled": 1.0, "correct": 1.0, "speedup": 2.1, "combined_score": 0.9},
                     "Change 1: register-block 2x2 outputs per thread",
                     {"compute_sanitizer": "========= ERROR SUMMARY: 0 errors"}, True),
    }
    layout = {10: ["root", "a", "b"], 20: ["a", "b", "c"]}  # the root fell out of the population by 20
    for n, keys in layout.items():
        folder = root / f"checkpoint_{n}"
        (folder / "programs").mkdir(parents=True, exist_ok=True)
        for key in keys:
            (folder / "programs" / f"{IDS[key]}.json").write_text(json.dumps(progs[key]))
        (folder / "metadata.json").write_text(json.dumps({
            "islands": [[IDS[k] for k in keys]], "archive": [], "best_program_id": IDS[keys[-1]],
            "last_iteration": n, "current_island": 0, "island_generations": [n], "feature_map": {},
        }))
        (folder / "best_program_info.json").write_text(json.dumps({"id": IDS[keys[-1]], "iteration": n}))
        (folder / "best_program.cu").write_text(progs[keys[-1]]["code"])


def llm4ad() -> None:
    run = HERE / "llm4ad" / "gemm_eoh" / "20250301_101500_"
    (run / "samples").mkdir(parents=True, exist_ok=True)
    (run / "population").mkdir(parents=True, exist_ok=True)
    samples = [
        {"sample_order": i, "algorithm": f"Idea {i}: " + alg, "function": KERNEL.format(note=f"sample {i}"),
         "score": score}
        for i, (alg, score) in enumerate([
            ("one thread per output", -2.0), ("shared-memory tiles", -1.2), ("broken indexing", None),
            ("register blocking", -0.9), ("vectorised loads", -1.0), ("tiles + unroll", -0.7),
        ], start=1)
    ]
    (run / "samples" / "samples_1~200.json").write_text(json.dumps(samples, indent=4))
    (run / "samples" / "samples_best.json").write_text(json.dumps([samples[0], samples[1], samples[5]], indent=4))

    def member(s: dict) -> dict:
        return {"algorithm": s["algorithm"], "function": s["function"], "score": s["score"]}

    # EoH keeps the best of each generation: pop_1 after samples 1-3, pop_2 after samples 4-6.
    (run / "population" / "pop_1.json").write_text(json.dumps([member(samples[1]), member(samples[0])], indent=4))
    (run / "population" / "pop_2.json").write_text(json.dumps([member(samples[5]), member(samples[3]),
                                                                member(samples[1])], indent=4))
    (run / "population" / "end.json").write_text("[]")


if __name__ == "__main__":
    openevolve()
    llm4ad()
