"""The sealed harness's CPU-side parts (issue 27): secret inputs and the fences' bookkeeping.

Secret inputs: the run folder's secret.json is drawn once when the run starts and read back by every
later caller (a resumed run, each shard); it is never in plan.json or spec.json; a fixed `evaluation.seed`
replaces it; verification and timing seeds derive from it and never overlap.
Fences: the layout arithmetic, the reading of an audit's results into reasons, the blame of the first
launch that changed something, and the digest the audit kernel computes (its host twin). The kernels
themselves run in tests/gpu/test_sealed.py.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from pydantic import ValidationError

from cudanalyst.api.spec import EvaluationSpec
from cudanalyst.runfolder import PLAN, SECRET, SPEC, run_secret, write_start
from cudanalyst.runner.kernels.timing.trials import blame
from cudanalyst.runner.kernels.verify.checker import first_index
from cudanalyst.runner.kernels.verify.fences import (
    DIGEST,
    GUARD,
    MAX_REGIONS,
    REGION_WORDS,
    Findings,
    Region,
    chunks,
    digest_host,
    guard_regions,
    pack_table,
    plain_layout,
    read_findings,
    vmm_layout,
)
from cudanalyst.runner.kernels.workers.requests import EvalSettings, derive_seeds, seeds_for
from cudanalyst.store import open_store


class _Run:
    """What write_start reads of an AttributionRun: to_dict() and spec.evaluation."""

    def __init__(self, evaluation: EvaluationSpec) -> None:
        self.spec = type("Spec", (), {"evaluation": evaluation})()
        self.evaluation = evaluation

    def to_dict(self) -> dict:
        return {"spec": {"evaluation": self.evaluation.model_dump(by_alias=True)}, "status": {}}


# ---- secret inputs ------------------------------------------------------------------------------------


def test_the_secret_is_drawn_once_at_the_start_and_read_back_by_every_later_caller(tmp_path):
    store = open_store(tmp_path / "run")
    write_start(store, _Run(EvaluationSpec()), {"units": 3, "digest": "abc"})
    secret = json.loads((tmp_path / "run" / SECRET).read_text())["seed"]
    assert isinstance(secret, int) and secret >= 0
    # A resumed run and every shard read the same one; none draws another.
    assert run_secret(store, EvaluationSpec()) == secret
    assert run_secret(open_store(tmp_path / "run"), EvaluationSpec()) == secret
    write_start(store, _Run(EvaluationSpec()), {"units": 3, "digest": "abc"})  # the run started again
    assert run_secret(store, EvaluationSpec()) == secret
    # Nothing else the run folder holds names it: not the plan (whose digest decides resumption), not the spec.
    for name in (PLAN, SPEC):
        assert str(secret) not in (tmp_path / "run" / name).read_text()


def test_two_runs_draw_different_secrets(tmp_path):
    a = run_secret(open_store(tmp_path / "a"), EvaluationSpec())
    b = run_secret(open_store(tmp_path / "b"), EvaluationSpec())
    assert a != b


def test_a_fixed_seed_replaces_the_secret_and_writes_none(tmp_path):
    store = open_store(tmp_path / "run")
    write_start(store, _Run(EvaluationSpec(seed=42)), {"units": 1})
    assert run_secret(store, EvaluationSpec(seed=42)) == 42
    assert not (tmp_path / "run" / SECRET).exists()


@pytest.mark.parametrize("content", ['{"seed": -3}', '{"seed": "x"}', '{"other": 1}', "[1]"])
def test_a_broken_secret_file_is_named(tmp_path, content):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / SECRET).write_text(content)
    with pytest.raises(ValueError, match="secret.json"):
        run_secret(open_store(tmp_path / "run"), EvaluationSpec())


def test_the_seed_field_is_bounded_and_camel_cased():
    assert EvaluationSpec.model_validate({"seed": 5}).seed == 5
    assert EvaluationSpec().seed is None
    with pytest.raises(ValidationError, match="seed"):
        EvaluationSpec.model_validate({"seed": -1})
    # At most 2^53 - 1: the API server keeps a schema's bounds as float64, and 2^63 - 1 rounds up past int64 there
    # (it then refused every spec that set a seed; found by the fuzzed specs).
    assert EvaluationSpec.model_validate({"seed": 2**53 - 1}).seed == 2**53 - 1
    with pytest.raises(ValidationError, match="seed"):
        EvaluationSpec.model_validate({"seed": 2**53})


def test_verification_and_timing_seeds_derive_from_the_secret_and_never_overlap():
    seeds = derive_seeds(123, 5)
    assert len(seeds.verify) == 5 and len(seeds.timing) == 2
    assert not set(seeds.verify) & set(seeds.timing)
    assert derive_seeds(123, 5) == seeds  # the same secret, the same inputs (resume, shards)
    assert not set(derive_seeds(124, 5).verify) & set(seeds.verify)
    assert all(0 <= s < 2**31 for s in (*seeds.verify, *seeds.timing))
    # The spec's seed wins over the run's secret; neither given, a fresh secret each time.
    assert seeds_for(EvalSettings(seed=9), secret=123) == derive_seeds(9, 5)
    assert seeds_for(EvalSettings(), secret=123) == seeds
    assert seeds_for(EvalSettings()) != seeds_for(EvalSettings())


def test_the_old_public_seeds_are_gone():
    """Seeds 1000..1004 were public (SEED_BASE + i): a run's seeds are no longer those."""
    seeds = seeds_for(EvalSettings())
    assert not set(seeds.verify) & set(range(1000, 1005))


# ---- fences: layout --------------------------------------------------------------------------------


def test_plain_guards_sit_on_both_sides_of_an_aligned_array():
    lay = plain_layout(1000)
    assert lay.front == lay.back == 64 << 10 and lay.size == 1024 and lay.gap == 0
    assert lay.mapped == lay.front + lay.size + lay.back


def test_vmm_layout_fills_whole_granules_and_reserves_an_unmapped_one_on_each_side():
    g = 2 << 20
    lay = vmm_layout(3 * g + 5, g)
    assert lay.mapped % g == 0 and lay.gap == g
    assert lay.front >= 64 << 10 and lay.back >= 64 << 10  # at least the minimum guard after it, too
    assert lay.reserved == lay.mapped + 2 * g
    small = vmm_layout(4, g)
    assert small.mapped == g and small.front + small.size + small.back == g


def test_guard_regions_border_the_array():
    lay = plain_layout(4096)
    before, after = guard_regions("y", 1 << 30, lay)
    assert before.ptr + before.words * 4 == 1 << 30 and before.side == "before" and before.kind == GUARD
    assert after.ptr == (1 << 30) + lay.size and after.words * 4 == lay.back


# ---- fences: reading an audit ---------------------------------------------------------------------------


def _row(changed: int = 0, lo: int | None = None, hi: int = 0, digest: int = 0) -> list[int]:
    return [changed, 0 if lo is None else (~lo) & ((1 << 64) - 1), hi, digest]


def test_a_breach_names_the_array_the_side_and_how_far_out():
    lay = plain_layout(400)
    regions = guard_regions("y", 1 << 30, lay) + [Region(1 << 32, 100, DIGEST, what="the expected output y")]
    # 3 words changed after y, the farthest the 51st word of the back guard; the digest as expected.
    results = np.array([_row(), _row(3, lo=10, hi=51), _row(digest=77)], dtype=np.uint64)
    found = read_findings(regions, results, {2: 77}, {"y": 400})
    assert not found.corrupted
    [why] = found.breaches
    assert "array y" in why and "after" in why and "204 bytes past its end" in why and "400 bytes in" in why
    # Before the array: the lowest changed word 16 words into a 16384-word guard is 65472 bytes before it.
    results = np.array([_row(1, lo=16, hi=17), _row(), _row(digest=77)], dtype=np.uint64)
    [why] = read_findings(regions, results, {2: 77}).breaches
    assert "before array y" in why and f"{(lay.front // 4 - 16) * 4} bytes before its start" in why


def test_a_changed_digest_is_harness_data_written():
    regions = [Region(1 << 32, 100, DIGEST, what="the kept input A of timing seed 1")]
    found = read_findings(regions, np.array([_row(digest=5)], dtype=np.uint64), {0: 6})
    assert found.corrupted == ["the kept input A of timing seed 1"] and "harness's own data" in found.reason()
    assert not read_findings(regions, np.array([_row(digest=6)], dtype=np.uint64), {0: 6})


def test_the_first_launch_that_changed_harness_data_is_blamed_not_the_ones_after_it():
    launches = [("frozen", "timed launch 1"), ("evil", "timed launch 1"), ("frozen", "timed launch 2"),
                ("honest", "timed launch 2")]
    hit = Findings(corrupted=["the expected output y of timing seed 1"])
    found = [Findings(), hit, hit, hit]  # the damage stays in every later audit
    culprits = blame(launches, found)
    assert list(culprits) == ["evil"] and culprits["evil"].startswith("timed launch 1: wrote outside")
    # A guard breach is its own launch's, wherever it happens.
    culprits = blame(launches, [Findings(), Findings(), Findings(), Findings(breaches=["wrote outside ..."])])
    assert list(culprits) == ["honest"]
    assert blame(launches, [Findings()] * 4) == {}


def test_the_checker_keeps_the_first_bad_index_complemented():
    assert first_index((~7) & ((1 << 64) - 1)) == 7
    assert first_index(0) == (1 << 64) - 1  # zero: nothing bad (the count says so first)


# ---- fences: the audit's argument and digest ------------------------------------------------------------


def test_the_region_table_is_packed_as_the_kernel_reads_it():
    regions = [Region(10, 2, GUARD), Region(20, 3, DIGEST)]
    table = pack_table(regions)
    assert table.shape == (3, MAX_REGIONS) and table.dtype == np.uint64
    assert list(table[:, 0]) == [10, 2, GUARD] and list(table[:, 1]) == [20, 3, DIGEST] and not table[:, 2:].any()
    with pytest.raises(ValueError):
        pack_table([Region(0, 1, GUARD)] * (MAX_REGIONS + 1))
    assert [len(c) for c in chunks([Region(0, 1, GUARD)] * (MAX_REGIONS + 3))] == [MAX_REGIONS, 3]
    assert REGION_WORDS == 4


def test_the_digest_sees_any_change_and_depends_on_the_key():
    words = np.arange(1000, dtype=np.uint32)
    base = digest_host(words, key=5)
    moved = words.copy()
    moved[[3, 7]] = moved[[7, 3]]  # the same words elsewhere: a plain sum would not see it
    changed = words.copy()
    changed[999] ^= 1
    assert digest_host(moved, 5) != base and digest_host(changed, 5) != base
    assert digest_host(words, 6) != base and digest_host(words, 5) == base


def test_expected_outputs_are_kept_masked_and_unmask_with_the_key():
    from cudanalyst.runner.kernels.verify.checker import mask

    for dtype in ("float32", "float64", "int32"):
        want = (np.arange(1000) * 0.5).astype(dtype)
        hidden = mask(want, key=99)
        assert hidden.dtype == want.dtype and hidden.shape == want.shape
        assert (hidden.view(f"u{want.itemsize}") != want.view(f"u{want.itemsize}")).mean() > 0.99  # noise
        assert np.array_equal(mask(hidden, key=99).view(f"u{want.itemsize}"), want.view(f"u{want.itemsize}"))
        assert not np.array_equal(mask(hidden, key=98).view(f"u{want.itemsize}"), want.view(f"u{want.itemsize}"))


def test_the_vmm_structures_match_cuda_h():
    """CUmemAllocationProp and CUmemAccessDesc as cuda.h (13.0) lays them out: ctypes passes them by pointer."""
    import ctypes

    from cudanalyst.runner.kernels.verify import fences

    prop, access = fences._CUmemAllocationProp, fences._CUmemAccessDesc
    assert (ctypes.sizeof(prop), prop.location.offset, prop.win32HandleMetaData.offset, prop.allocFlags.offset) == \
        (32, 8, 16, 24)
    assert (ctypes.sizeof(access), access.flags.offset) == (12, 8)


def test_without_the_driver_the_fences_fall_back_to_plain_guards_and_say_so():
    import ctypes.util

    from cudanalyst.runner.kernels.verify.fences import allocator

    if ctypes.util.find_library("cuda"):
        pytest.skip("a CUDA driver is installed here: the VMM path is taken (tests/gpu/test_sealed.py covers it)")
    chosen = allocator(cuda=object())
    assert chosen.mode == "guards"
    assert allocator(cuda=object(), prefer_vmm=False).mode == "guards"
