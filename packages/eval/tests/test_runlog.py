import json

import numpy as np
import pytest

import lamella.eval as le

# A hand-written marl-eval file, as Mava writes it: extra scalar fields in steps
# (read as metrics of one value), step keys out of order, absolute metrics.
MARL_EVAL = {
    "matrax": {
        "climbing": {
            "ippo": {
                "seed_0": {
                    "step_1": {"step_count": 100, "episode_return": [3.0, 5.0], "elapsed_time": 1.5},
                    "step_0": {"step_count": 0, "episode_return": [1.0, 1.0], "elapsed_time": 0.5},
                    "absolute_metrics": {"episode_return": [4.0, 6.0, 8.0]},
                },
                "seed_1": {
                    "step_0": {"step_count": 0, "episode_return": [2.0]},
                    "step_1": {"step_count": 100, "episode_return": 7},
                    "absolute_metrics": {"episode_return": [9.0]},
                },
            }
        }
    }
}


@pytest.fixture
def marl_eval_file(tmp_path):
    path = tmp_path / "metrics.json"
    path.write_text(json.dumps(MARL_EVAL))
    return path


def test_reads_marl_eval_file(marl_eval_file):
    runs = le.read_run_log(marl_eval_file)
    assert [r.name for r in runs] == ["matrax/climbing/ippo/seed_0", "matrax/climbing/ippo/seed_1"]
    first = runs[0]
    assert [e.index for e in first.evaluations] == [0, 1]
    assert [e.step_count for e in first.evaluations] == [0, 100]
    np.testing.assert_array_equal(first.evaluations[1].metrics["episode_return"], [3.0, 5.0])
    np.testing.assert_array_equal(first.evaluations[1].metrics["elapsed_time"], [1.5])
    np.testing.assert_array_equal(runs[1].evaluations[1].metrics["episode_return"], [7.0])
    np.testing.assert_array_equal(first.absolute_metrics["episode_return"], [4.0, 6.0, 8.0])


def test_scores_are_episode_means(marl_eval_file):
    runs = le.read_run_logs([marl_eval_file.parent])
    # One path, as text or a Path, is a list of one (not its characters).
    for one in (str(marl_eval_file.parent), marl_eval_file.parent):
        assert [run.name for run in le.read_run_logs(one)] == [run.name for run in runs]
    final = le.final_scores(runs, "episode_return")
    assert final.source == "absolute_metrics" and final.tasks == ("matrax/climbing",)
    np.testing.assert_array_equal(final.values["ippo"], [[6.0], [9.0]])
    last = le.final_scores(runs, "episode_return", source="last")
    np.testing.assert_array_equal(last.values["ippo"], [[4.0], [7.0]])
    curves = le.curve_scores(runs, "episode_return")
    np.testing.assert_array_equal(curves.values["ippo"][:, 0, :], [[1.0, 4.0], [2.0, 7.0]])
    np.testing.assert_array_equal(curves.step_counts["ippo"], [0.0, 100.0])


def _broken(path, mutate):
    data = json.loads(json.dumps(MARL_EVAL))
    mutate(data["matrax"]["climbing"]["ippo"]["seed_1"])
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (lambda run: run["step_1"].pop("step_count"), "'step_count'"),
        (lambda run: run["step_1"].update(episode_return=["high"]), "'episode_return'"),
        (lambda run: run["step_1"].update(episode_return=[]), "'episode_return'"),
        (lambda run: run["step_1"].update(step_count=-3), "'step_count'"),
        (lambda run: run["absolute_metrics"].update(episode_return=[float("nan")]), "'episode_return'"),
        (lambda run: run.update(evaluation_3={}), "'evaluation_3'"),
    ],
)
def test_wrong_field_names_field_and_run(tmp_path, mutate, field):
    path = _broken(tmp_path / "metrics.json", mutate)
    with pytest.raises(le.RunLogError) as error:
        le.read_run_log(path)
    message = str(error.value)
    assert field in message
    assert "matrax/climbing/ippo/seed_1" in message
    assert str(path) in message


def test_missing_metric_names_field_and_run(marl_eval_file):
    runs = le.read_run_log(marl_eval_file)
    with pytest.raises(le.RunLogError, match=r"seed_0.*'win_rate'"):
        le.final_scores(runs, "win_rate", source="absolute")


def test_a_source_the_runs_lack_names_the_other_source(tmp_path):
    runs = le.read_run_log(_broken(tmp_path / "metrics.json", lambda run: run.pop("absolute_metrics")))
    with pytest.raises(
        le.RunLogError, match=r"seed_1: no 'absolute_metrics'.*source='last' \(--source last\)"
    ):
        le.final_scores(runs, "episode_return", source="absolute")
    runs = le.read_run_log(
        _broken(tmp_path / "only_absolute.json", lambda run: [run.pop(k) for k in ("step_0", "step_1")])
    )
    with pytest.raises(le.RunLogError, match=r"seed_1: no 'step_<i>' evaluation.*--source absolute"):
        le.final_scores(runs, "episode_return", source="last")


def test_training_metric_curves_start_at_the_first_evaluation_that_holds_it(tmp_path):
    """A training metric is logged from the first update on, the evaluation before training
    (``step_0``) has none. Before: ``--metric train_loss`` failed for every run log the driver
    writes, "step_0: field 'train_loss' is missing"; a later evaluation without it still fails."""
    data = json.loads(json.dumps(MARL_EVAL))
    for seed, loss in (("seed_0", 0.5), ("seed_1", 0.25)):
        data["matrax"]["climbing"]["ippo"][seed]["step_1"]["train_loss"] = [loss]
    path = tmp_path / "metrics.json"
    path.write_text(json.dumps(data))
    curves = le.curve_scores(le.read_run_log(path), "train_loss")
    np.testing.assert_array_equal(curves.values["ippo"][:, 0, :], [[0.5], [0.25]])
    np.testing.assert_array_equal(curves.step_counts["ippo"], [100.0])
    data["matrax"]["climbing"]["ippo"]["seed_1"]["step_2"] = {"step_count": 200, "episode_return": [1.0]}
    data["matrax"]["climbing"]["ippo"]["seed_0"]["step_2"] = {"step_count": 200, "episode_return": [1.0]}
    path.write_text(json.dumps(data))
    with pytest.raises(le.RunLogError, match=r"seed_0, step_2: field 'train_loss' is missing"):
        le.curve_scores(le.read_run_log(path), "train_loss")


def test_unequal_curves_raise_unless_truncated(tmp_path):
    path = _broken(tmp_path / "metrics.json", lambda run: run.pop("step_1"))
    runs = le.read_run_log(path)
    with pytest.raises(le.RunLogError, match="seed_1 has 1 evaluations"):
        le.curve_scores(runs, "episode_return")
    assert le.curve_scores(runs, "episode_return", truncate=True).values["ippo"].shape == (2, 1, 1)


def test_curves_refuse_runs_evaluated_at_different_steps(tmp_path):
    """Runs of one algorithm on one task evaluated on different step grids (two run directories
    of other settings under one name): the curve's x was their mean step count, silently."""
    data = json.loads(json.dumps(MARL_EVAL))
    data["matrax"]["climbing"]["ippo"]["seed_1"]["step_1"]["step_count"] = 1000
    path = tmp_path / "metrics.json"
    path.write_text(json.dumps(data))
    with pytest.raises(
        le.RunLogError,
        match=r"'ippo' on matrax/climbing: evaluation 1 is at 100 steps in run .*seed_0 but 1000 in .*seed_1.*same evaluation steps",
    ):
        le.curve_scores(le.read_run_log(path), "episode_return")
    data["matrax"]["climbing"]["ippo"]["seed_1"]["step_1"]["step_count"] = 102  # a producer's jitter
    path.write_text(json.dumps(data))
    np.testing.assert_array_equal(
        le.curve_scores(le.read_run_log(path), "episode_return").step_counts["ippo"], [0, 101]
    )


def test_algorithm_missing_a_task_raises(marl_eval_file):
    runs = le.read_run_log(marl_eval_file)
    other = le.runs_from_dict(
        {"matrax": {"penalty": {"mappo": {"seed_0": MARL_EVAL["matrax"]["climbing"]["ippo"]["seed_0"]}}}}
    )
    with pytest.raises(le.RunLogError, match="'ippo' has no runs on task"):
        le.final_scores([*runs, *other], "episode_return")


def test_csv_view_round_trip(tmp_path, marl_eval_file):
    runs = le.read_run_log(marl_eval_file)
    csv_path = tmp_path / "metrics.csv"
    le.write_csv(runs, csv_path)
    lines = csv_path.read_text().splitlines()
    assert lines[0] == ",".join(le.CSV_HEADER)
    assert "matrax,climbing,ippo,seed_0,1,100,episode_return,1,5.0" in lines
    back = le.read_run_log(csv_path)
    assert [r.name for r in back] == [r.name for r in runs]
    for a, b in zip(runs, back):
        assert [(e.index, e.step_count) for e in a.evaluations] == [
            (e.index, e.step_count) for e in b.evaluations
        ]
        for ea, eb in zip(a.evaluations, b.evaluations):
            assert ea.metrics.keys() == eb.metrics.keys()
            for k in ea.metrics:
                np.testing.assert_array_equal(ea.metrics[k], eb.metrics[k])
        np.testing.assert_array_equal(
            a.absolute_metrics["episode_return"], b.absolute_metrics["episode_return"]
        )


def test_csv_wrong_field_names_line_and_run(tmp_path):
    path = tmp_path / "metrics.csv"
    path.write_text(",".join(le.CSV_HEADER) + "\nenv,task,ppo,seed_0,0,ten,return,0,1.0\n")
    with pytest.raises(le.RunLogError, match=r"line 2, run env/task/ppo/seed_0: field 'step_count'"):
        le.read_csv(path)
    path.write_text("environment,task,algorithm\n")
    with pytest.raises(le.RunLogError, match="header"):
        le.read_csv(path)


def test_duplicate_run_across_files_raises(tmp_path, marl_eval_file):
    copy = tmp_path / "other" / "metrics.json"
    copy.parent.mkdir()
    copy.write_text(marl_eval_file.read_text())
    with pytest.raises(le.RunLogError, match="appears in both"):
        le.read_run_logs([marl_eval_file, copy])


def test_normalize_minmax_and_reference():
    scores = le.Scores(
        "r", ("e/a", "e/b"), {"x": np.array([[0.0, 10.0], [2.0, 30.0]]), "y": np.array([[4.0, 20.0]])}
    )
    minmax = le.normalize(scores)
    np.testing.assert_allclose(minmax.values["x"], [[0.0, 0.0], [0.5, 1.0]])
    np.testing.assert_allclose(minmax.values["y"], [[1.0, 0.5]])
    ref = le.normalize(scores, {"a": (0.0, 2.0), "e/b": (10.0, 20.0)})
    np.testing.assert_allclose(ref.values["x"], [[0.0, 0.0], [1.0, 2.0]])
    with pytest.raises(ValueError, match="no reference scores for task 'e/b'"):
        le.normalize(scores, {"a": (0.0, 1.0)})
    # Reversed references are meaningful (lower is better): worst -> 0, best -> 1.
    reversed_ = le.normalize(scores, {"a": (4.0, 0.0), "b": (30.0, 10.0)})
    np.testing.assert_allclose(reversed_.values["y"], [[0.0, 0.5]])


@pytest.mark.parametrize(
    "pair, message",
    [
        (
            (1.0, 1.0),
            r"task 'e/a' has low == high == 1.0 in its reference scores; normalisation would divide "
            "by zero: give two different scores",
        ),
        (
            (0.0, 1.0, 5.0),
            r"reference scores of task 'e/a' are \(0.0, 1.0, 5.0\); expected a \(low, high\) pair",
        ),
        (1.0, r"reference scores of task 'e/a' are 1.0; expected a \(low, high\) pair of two numbers"),
        ("01", r"reference scores of task 'e/a' are '01'; expected a \(low, high\) pair"),
        ((0.0, float("nan")), r"reference scores of task 'e/a' are \(0.0, nan\); both must be finite"),
    ],
)
def test_normalize_refuses_equal_or_malformed_references(pair, message):
    scores = le.Scores("r", ("e/a", "e/b"), {"x": np.array([[0.0, 10.0], [2.0, 30.0]])})
    with pytest.raises(le.EvalError, match=message):
        le.normalize(scores, {"a": pair, "b": (0.0, 1.0)})
