"""One cache root: CUDANALYST_CACHE moves every cache the package keeps; CUDANALYST_COMPILE_CACHE the compile cache alone."""

from __future__ import annotations

from pathlib import Path

import pytest

from cudanalyst.api.spec import EvaluationSpec
from cudanalyst.cache import cache_root, compile_cache_dir, models_cache
from cudanalyst.runner.kernels.compile.nvcc import shared_cache
from cudanalyst.runner.kernels.workers.requests import EvalSettings
from cudanalyst.runner.weights import resolve_model_path


def test_the_root_moves_every_cache(tmp_path, monkeypatch):
    monkeypatch.delenv("CUDANALYST_COMPILE_CACHE", raising=False)
    monkeypatch.setenv("CUDANALYST_CACHE", str(tmp_path))
    assert cache_root() == tmp_path and models_cache() == tmp_path / "models"
    assert Path(shared_cache().root) == compile_cache_dir() == tmp_path / "compile"
    model = tmp_path / "models" / "tiny"
    model.mkdir(parents=True)
    (model / "config.json").write_text("{}")
    assert resolve_model_path("tiny") == str(model)  # a bare name is a folder of the models cache


def test_the_compile_cache_alone_can_move(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDANALYST_CACHE", str(tmp_path / "root"))
    monkeypatch.setenv("CUDANALYST_COMPILE_CACHE", str(tmp_path / "nvcc"))
    assert compile_cache_dir() == tmp_path / "nvcc" and models_cache() == tmp_path / "root" / "models"


def test_an_empty_variable_means_the_default(monkeypatch):
    monkeypatch.setenv("CUDANALYST_CACHE", "")
    assert cache_root() == Path.home() / ".cache" / "cudanalyst"


def test_eval_settings_take_the_spec_defaults_and_bounds():
    assert EvalSettings().model_dump() == EvaluationSpec().model_dump()
    assert EvalSettings.of(EvaluationSpec(trials=1)).trials == 1  # the spec's minimum is obeyed, not raised
    with pytest.raises(ValueError, match="trials"):
        EvalSettings(trials=0)
