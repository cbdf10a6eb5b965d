"""Game files and `cudanalyst attribute --game`: encoding, output shape, and bad files (exit 2, named)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cudanalyst.attribution.games import (
    GameError,
    coalition_key,
    game_from_mapping,
    load_game_file,
    parse_coalition,
)
from cudanalyst.cli.attribute import main

PLAYERS = ["a", "b", "c"]
VALUES = {"": 0.1, "a": 0.3, "b": 0.2, "c": 0.1, "a,b": 0.5, "a,c": 0.3, "b,c": 0.2, "a,b,c": 0.6}


def write(tmp_path: Path, data: object, name: str = "game.json") -> Path:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


def test_coalition_keys_use_spec_order_and_accept_any_order() -> None:
    assert parse_coalition("c,a", PLAYERS) == 0b101 == parse_coalition("a, c", PLAYERS)
    assert coalition_key(0b101, PLAYERS) == "a,c"
    assert parse_coalition("", PLAYERS) == 0


def test_cli_game_prints_the_indices(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    shuffled = {",".join(reversed(k.split(","))) if k else k: v for k, v in VALUES.items()}
    assert main(["--game", str(write(tmp_path, {"players": PLAYERS, "values": shuffled}))]) == 0
    out = json.loads(capsys.readouterr().out)
    assert list(out) == ["players", "banzhaf", "interactions", "shapley", "moebius"]
    assert out["players"] == PLAYERS
    # b_a = mean over S in {{}, b, c, bc} of v(S+a) - v(S) = (0.2 + 0.3 + 0.2 + 0.4) / 4.
    assert out["banzhaf"]["a"] == pytest.approx(0.275)
    assert list(out["interactions"]) == ["a,b", "a,c", "b,c"]
    # I_ab = ((0.5 - 0.3 - 0.2 + 0.1) + (0.6 - 0.3 - 0.2 + 0.1)) / 2.
    assert out["interactions"]["a,b"] == pytest.approx(0.15)
    assert sum(out["shapley"].values()) == pytest.approx(0.6 - 0.1)
    assert out["moebius"][""] == pytest.approx(0.1) and out["moebius"]["a,b"] == pytest.approx(0.1)
    assert len(out["moebius"]) == 8


def test_cli_game_any_order_on_request(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, {"players": PLAYERS, "values": VALUES})
    assert main(["--game", str(path), "--order", "3", "--shapley-interactions"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert list(out["interactions"]) == ["a,b,c"]
    assert out["interactions"]["a,b,c"] == pytest.approx(out["moebius"]["a,b,c"])  # top order: both equal m(N)
    assert out["shapleyInteractions"]["a,b,c"] == pytest.approx(out["moebius"]["a,b,c"])


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"players": PLAYERS, "values": {k: v for k, v in VALUES.items() if k != "a,c"}}, "missing coalition 'a,c'"),
        ({"players": PLAYERS, "values": {**VALUES, "b,a": 0.5}}, "values['b,a']: the same coalition as values['a,b']"),
        ({"players": PLAYERS, "values": {**VALUES, "a,d": 0.5}}, "values['a,d']: unknown player 'd'"),
        ({"players": PLAYERS, "values": {**VALUES, "a": "high"}}, "values['a']: expected a finite number"),
        ({"players": ["a", "a"], "values": {}}, "players must be unique; repeated: a"),
        ({"players": [], "values": {}}, "players: expected a non-empty list"),
        ({"players": ["a,b"], "values": {}}, "may not contain commas"),
        ({"values": VALUES}, "missing key 'players'"),
        ({"players": PLAYERS, "values": VALUES, "extra": 1}, "unknown key(s) 'extra'"),
        ([1, 2], "expected a JSON object"),
        ('{"players": ["a"], "values": {"": 1, "a": NaN}}', "NaN is not a number JSON allows"),
        ('{"players": ["a"],\n "values": {', "not valid JSON at line 2"),
    ],
)
def test_bad_game_files_exit_2_naming_file_and_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], data: object, message: str
) -> None:
    path = write(tmp_path, data)
    assert main(["--game", str(path)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""  # nothing partial on stdout
    assert str(path) in captured.err
    assert message in captured.err


def test_missing_file_and_bad_order(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--game", str(tmp_path / "nope.json")]) == 2
    assert "nope.json: cannot read" in capsys.readouterr().err
    path = write(tmp_path, {"players": PLAYERS, "values": VALUES})
    assert main(["--game", str(path), "--order", "4"]) == 2
    assert "--order 4" in capsys.readouterr().err


def test_many_missing_coalitions_are_counted() -> None:
    with pytest.raises(GameError, match=r"and 27 more \(32 of 32 missing"):
        game_from_mapping(list("abcde"), {}, "g.json")


def test_load_game_file_table(tmp_path: Path) -> None:
    game = load_game_file(write(tmp_path, {"players": PLAYERS, "values": VALUES}))
    assert game.players == tuple(PLAYERS)
    assert game.values[0b011] == 0.5 and game.values[0b111] == 0.6
