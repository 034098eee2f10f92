"""Summaries across seeds (``summarize_results``) on hand-made results, and the test-suite
lookup without a provider; no training, no JAX compile."""

import csv
import json

import numpy as np
import pytest

import lamella.eval as le
from lamella.eval._src import checkpoints as lib


def result(test_env, seed, mean_return, success=None, lengths=None):
    return le.CheckpointResult(
        checkpoint="runs/a/checkpoints/checkpoint_000000002.msgpack",
        algorithm="plr",
        train_env="AMaze-13x13-v0",
        test_env=test_env,
        overrides="",
        seed=str(seed),
        episodes=4,
        mean_return=mean_return,
        std_return=0.0,
        success_rate=success,
        returns=np.full(4, mean_return),
        lengths=None if lengths is None else np.asarray(lengths, np.float64),
    )


RESULTS = [
    result("SixteenRooms", 0, 0.2, 0.25, [10, 20, 30, 40]),
    result("SixteenRooms", 1, 0.4, 0.5, [10, 10, 10, 10]),
    result("SixteenRooms", 2, 0.6, 0.75, [40, 40, 40, 40]),
    result("SixteenRooms", "mean", 0.4, 0.5),
    result("Labyrinth", 0, 0.0, 0.0, [450] * 4),
    result("Labyrinth", 1, 0.0, 0.0, [450] * 4),
    result("Labyrinth", 2, 0.0, 0.0, [450] * 4),
]


def test_means_and_intervals_across_seeds(tmp_path):
    summaries = le.summarize_results(RESULTS, reps=500, confidence=0.9, seed=1)
    assert [s.test_env for s in summaries] == ["SixteenRooms", "Labyrinth"]
    rooms, labyrinth = summaries
    assert (rooms.seeds, rooms.episodes) == (3, 4)
    assert rooms.mean_return == pytest.approx(0.4) and rooms.success_rate == pytest.approx(0.5)
    assert rooms.mean_length == pytest.approx(np.mean([25, 10, 40]))
    # Bootstrap means of three seeds lie between the smallest and the largest seed.
    assert 0.2 <= rooms.return_low < 0.4 < rooms.return_high <= 0.6
    assert 0.25 <= rooms.success_low < 0.5 < rooms.success_high <= 0.75
    assert 10 <= rooms.length_low < rooms.mean_length < rooms.length_high <= 40
    # Equal seeds: the interval is the point.
    assert labyrinth.success_low == labyrinth.success_rate == labyrinth.success_high == 0.0
    assert labyrinth.length_low == labyrinth.mean_length == labyrinth.length_high == 450.0
    assert (rooms.confidence, rooms.reps) == (0.9, 500)

    csv_path, json_path = le.write_summary(summaries, tmp_path / "summary", RESULTS)
    with open(csv_path, newline="") as file:
        rows = list(csv.DictReader(file))
    assert tuple(rows[0]) == lib.SUMMARY_COLUMNS
    assert float(rows[0]["return_low"]) == rooms.return_low
    data = json.loads(open(json_path).read())
    assert len(data["per_seed"]) == 6 and data["summary"][1]["mean_length"] == 450.0
    header, table = le.summary_table(summaries)
    assert header == ["checkpoint", "test env", "seeds", "success rate", "return", "episode length"]
    assert table[1] == [
        "plr",
        "Labyrinth",
        "3",
        "0.000 [0.000, 0.000]",
        "0.000 [0.000, 0.000]",
        "450.000 [450.000, 450.000]",
    ]


def test_no_success_no_length_columns():
    plain = [result("CartPole-v1", s, float(s)) for s in range(2)]
    (summary,) = le.summarize_results(plain, reps=50)
    assert summary.success_rate is summary.success_low is summary.mean_length is None
    assert le.summary_table([summary])[0] == ["checkpoint", "test env", "seeds", "return"]
    with pytest.raises(ValueError, match="no per-seed results"):
        le.summarize_results([result("x", "mean", 0.0)])


def test_a_suite_without_providers_names_the_package(monkeypatch):
    monkeypatch.setattr(lib, "test_suites", lambda: {})
    with pytest.raises(le.EvalError, match="pip install lamella-ued"):
        le.evaluate_checkpoints(["runs/none"], suite="minimax-test")
    with pytest.raises(le.EvalError, match="not both"):
        le.evaluate_checkpoints(["runs/none"], ["CartPole-v1"], suite="minimax-test")


def test_an_unknown_suite_is_explained_by_the_provider_with_the_closest_names(monkeypatch):
    """Two providers (sorted by entry-point name, "foraging" before "maze"): a name neither
    knows gets the "did you mean" of the provider whose names are closest to it, whichever
    comes first."""

    class Provider:
        def __init__(self, kind, suites, cases):
            self.kind, self.suites, self.cases = kind, suites, cases

        def resolve(self, text):
            raise ValueError(f"unknown suite or {self.kind} {text!r}")

    providers = {
        "foraging": Provider("level", {"foraging-5x5": ()}, ("Adjacent", "Corridor")),
        "maze": Provider("maze", {"minimax-test": ()}, ("SixteenRooms", "Labyrinth")),
    }
    monkeypatch.setattr(lib, "test_suites", lambda: providers)
    with pytest.raises(le.EvalError, match="unknown suite or maze 'minimax'"):
        le.evaluate_checkpoints(["runs/none"], suite="minimax")
    with pytest.raises(le.EvalError, match="unknown suite or level 'Corridr'"):
        le.evaluate_checkpoints(["runs/none"], suite="Corridr")
