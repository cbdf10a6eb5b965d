"""`cudanalyst import`: end to end into a folder and into S3 (moto), read back with the trajectory loader."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from s3_server import S3Endpoint, free_port

from cudanalyst.cli import main
from cudanalyst.cli.importer import default_task
from cudanalyst.store import S3Settings
from cudanalyst.trajectory import freeze, load_trajectory

DATA = Path(__file__).parent / "data"
OE = DATA / "openevolve" / "gemm"
LA = DATA / "llm4ad" / "gemm_eoh" / "20250301_101500_"


def test_openevolve_import_reads_back_and_freezes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    dest = tmp_path / "traj"
    assert main(["import", "openevolve", str(OE), "--to", str(dest), "--description", "fixture"]) == 0
    out = capsys.readouterr().out
    assert "imported 4 programs of task 'gemm'" in out and "analyzer, debugger, profiler" in out
    traj = load_trajectory(str(dest))
    assert traj.manifest.tasks == ["gemm"] and traj.manifest.generations == [0, 1, 2]
    assert set(traj.manifest.players) == {"debugger", "analyzer", "profiler"}
    assert traj.manifest.source["format"] == "openevolve" and traj.manifest.description == "fixture"
    frozen = freeze(traj.programs, generations=[1], per_generation=1, seed=0)
    assert len(frozen) == 1 and frozen[0].generation == 1


def test_import_is_deterministic(tmp_path: Path) -> None:
    for name in ("a", "b"):
        assert main(["import", "llm4ad", str(LA), "--task", "gemm", "--to", str(tmp_path / name)]) == 0
    for file in ("programs.jsonl", "trajectory.json"):
        assert (tmp_path / "a" / file).read_bytes() == (tmp_path / "b" / file).read_bytes()


def test_llm4ad_import_into_s3_with_secret_folder_credentials(
    tmp_path: Path, s3_endpoint: S3Endpoint, s3_bucket: str
) -> None:
    creds = tmp_path / "secret"
    creds.mkdir()
    (creds / "AWS_ACCESS_KEY_ID").write_text(s3_endpoint.access_key_id)
    (creds / "AWS_SECRET_ACCESS_KEY").write_text(s3_endpoint.secret_access_key)
    uri = f"s3://{s3_bucket}/trajectories/gemm-eoh/"
    rc = main(["import", "llm4ad", str(LA / "samples" / "samples_1~200.json"), "--task", "gemm",
               "--samples-per-generation", "2", "--to", uri, "--s3-endpoint", s3_endpoint.url,
               "--s3-credentials-dir", str(creds)])
    assert rc == 0
    settings = S3Settings(endpoint=s3_endpoint.url, credentials_dir=str(creds))
    traj = load_trajectory(uri, settings)
    assert [p.generation for p in traj.programs] == [0, 0, 1, 1, 2, 2]
    assert traj.manifest.source["samplesPerGeneration"] == 2


def test_existing_trajectory_needs_force(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    dest = tmp_path / "traj"
    assert main(["import", "llm4ad", str(LA), "--task", "gemm", "--to", str(dest)]) == 0
    before = (dest / "programs.jsonl").read_bytes()
    assert main(["import", "openevolve", str(OE), "--to", str(dest)]) == 2
    assert "already holds a trajectory; pass --force" in capsys.readouterr().err
    assert (dest / "programs.jsonl").read_bytes() == before
    assert main(["import", "openevolve", str(OE), "--to", str(dest), "--force"]) == 0
    assert load_trajectory(str(dest)).manifest.source["format"] == "openevolve"


def _fails(args: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    assert main(args) == 2
    return capsys.readouterr().err


def test_iteration_windows_from_the_command_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    dest = tmp_path / "traj"
    assert main(["import", "openevolve", str(OE), "--to", str(dest), "--generation-from", "iteration",
                 "--iterations-per-generation", "5"]) == 0
    assert load_trajectory(str(dest)).manifest.generations == [0, 5]
    err = _fails(["import", "openevolve", str(OE), "--to", str(tmp_path / "other"),
                  "--iterations-per-generation", "5"], capsys)
    assert "--iterations-per-generation 5: needs --generation-from iteration" in err
    assert not (tmp_path / "other").exists()


def test_malformed_source_writes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "ckpt"
    (bad / "programs").mkdir(parents=True)
    (bad / "programs" / "ok.json").write_text('{"id": "ok", "code": "x"}')
    (bad / "programs" / "zz.json").write_text('{"id": "zz", "code": "x", "generation": "late"}')
    dest = tmp_path / "traj"
    err = _fails(["import", "openevolve", str(bad), "--task", "gemm", "--to", str(dest)], capsys)
    assert "programs/zz.json" in err and "'generation' must be an integer" in err
    assert not dest.exists()


@pytest.mark.parametrize(("args", "message"), [
    (["openevolve", "/no/such/folder"], "/no/such/folder: no such file or folder"),
    (["openevolve", str(LA)], "is not an OpenEvolve checkpoint"),
    (["llm4ad", str(OE)], "holds no LLM4AD sample files"),
    (["openevolve", str(OE / "checkpoints" / "checkpoint_10" / "metadata.json")], "is a folder"),
    (["openevolve", str(OE), "--feedback-map", "stderr"], "expected ARTIFACT=PLAYER"),
    (["llm4ad", str(LA), "--samples-per-generation", "0"], "must be >= 1"),
])
def test_bad_input_exits_2_with_a_message(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                          args: list[str], message: str) -> None:
    dest = tmp_path / "traj"
    err = _fails(["import", *args, "--task", "gemm", "--to", str(dest)], capsys)
    assert message in err
    assert not dest.exists()


def test_missing_credentials_exit_2(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
                                    tmp_path: Path) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    err = _fails(["import", "openevolve", str(OE), "--to", "s3://bucket/t/",
                  "--s3-endpoint", f"http://127.0.0.1:{free_port()}"], capsys)
    assert "no S3 credentials found" in err and "s3://bucket/t/" in err


def test_unreachable_destination_exits_2(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    dead = f"http://127.0.0.1:{free_port()}"
    err = _fails(["import", "openevolve", str(OE), "--to", "s3://bucket/t/", "--s3-endpoint", dead], capsys)
    assert dead in err and "unreachable" in err


def test_default_task_skips_generic_folder_names() -> None:
    assert default_task(str(OE)) == "gemm"
    assert default_task(str(OE / "checkpoints" / "checkpoint_20")) == "gemm"
    assert default_task(str(LA / "samples" / "samples_1~200.json")) == "gemm_eoh"
    assert default_task("s3://bucket/runs/atax/openevolve_output/checkpoints/") == "atax"


def test_a_task_outside_the_suite_is_noted(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["import", "llm4ad", str(LA), "--to", str(tmp_path / "t")]) == 0
    assert "task 'gemm_eoh' is not in the bundled task suite" in capsys.readouterr().err


def test_command_line_exit_status_and_help(tmp_path: Path) -> None:
    help_text = subprocess.run([sys.executable, "-m", "cudanalyst", "import", "openevolve", "--help"],
                               capture_output=True, text=True, check=True).stdout
    assert "--feedback-map" in help_text and "--to" in help_text
    bad = subprocess.run([sys.executable, "-m", "cudanalyst", "import", "llm4ad", str(tmp_path), "--task", "x",
                          "--to", str(tmp_path / "out")], capture_output=True, text=True)
    assert bad.returncode == 2 and "holds no LLM4AD sample files" in bad.stderr
