"""``lamella eval report``: the HTML file's content, the same file in a real browser, bad input.

The report covers the tiny PPO run of conftest.py (real metrics, config.json and checkpoints,
so the episode GIF is drawn from its final checkpoint) and a synthetic second algorithm whose
run log also holds per-agent (``return_agent_<i>``) and per-level (``solved_level_<i>``) keys,
the named-axis keys multi-agent and UED runners write (docs/run-log-format.md).

The browser test opens the file in headless Chromium through Selenium and the system's
chromedriver (Debian: ``apt-get install chromium chromium-driver``; ``.ci/run`` installs them).
Without a browser it fails where ``CI`` is set and is skipped, with the reason, elsewhere.
"""

from __future__ import annotations

import base64
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from typing import Any

import numpy as np
import pytest

from lamella.eval.__main__ import main
from lamella.eval._src import report as lib

REPS = 200
SECTION_IDS = [sid for sid, _ in lib.SECTIONS]


def _synthetic_run(
    path, versions, algorithm="dqn", metric="mean_episode_return", seeds=2, evaluations=4, settings=None
):
    """A run directory with metrics.json and config.json (no checkpoints) on CartPole-v1;
    ``settings`` are added to config.json's ``config``."""
    rng = np.random.default_rng(0)
    runs = {}
    for seed in range(seeds):
        run = {}
        for i in range(evaluations):
            evaluation = {
                "step_count": 64 * i,
                metric: [float(20 + 10 * i + rng.normal()), float(25 + 9 * i)],
            }
            evaluation.update({f"return_agent_{a}": [float(5 * a + i + seed)] for a in range(2)})
            evaluation.update({f"solved_level_{level}": [float((level + seed) % 2)] for level in range(3)})
            run[f"step_{i}"] = evaluation
        runs[f"seed_{seed}"] = run
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "metrics.json"), "w") as file:
        json.dump({"classic_control": {"CartPole-v1": {algorithm: runs}}}, file)
    config = {
        "algorithm": algorithm,
        "config": {
            "env_id": "CartPole-v1",
            "learning_rate": 0.001,
            "eval_episodes": 2,
            "buffer_size": 1000,
            **(settings or {}),
        },
        "devices": {"num_devices": 1, "platform": "cpu", "device_kind": "cpu"},
        "versions": versions,
    }
    with open(os.path.join(path, "config.json"), "w") as file:
        json.dump(config, file)
    return str(path)


@pytest.fixture(scope="module")
def versions(ppo_run_dir):
    with open(os.path.join(ppo_run_dir, "config.json")) as file:
        return json.load(file)["versions"]


@pytest.fixture(scope="module")
def synthetic_dir(tmp_path_factory, versions):
    return _synthetic_run(tmp_path_factory.mktemp("dqn_run"), versions)


@pytest.fixture(scope="module")
def report(ppo_run_dir, synthetic_dir, tmp_path_factory):
    """``(path, text)`` of the report over both run directories, written through the CLI."""
    path = str(tmp_path_factory.mktemp("report") / "report.html")
    assert main(["report", ppo_run_dir, synthetic_dir, "-o", path, "--reps", str(REPS)]) == 0
    with open(path, encoding="utf-8") as file:
        return path, file.read()


def _section(text: str, sid: str) -> str:
    match = re.search(rf'<section id="{sid}">(.*?)</section>', text, re.S)
    assert match is not None, f"section {sid} missing"
    return match.group(1)


def test_report_content(report, ppo_run_dir, synthetic_dir, versions):
    _, text = report
    # Self-contained: plotly.js inline, no script or stylesheet fetched from anywhere.
    assert not re.search(r"<script[^>]+src=", text) and not re.search(r"<link[^>]+stylesheet", text)
    assert re.search(r"https?://", re.sub(r"<script.*?</script>", "", text, flags=re.S)) is None
    assert "Plotly.newPlot" in text and len(text) > 1_000_000  # plotly.min.js itself is ~3.5 MB
    sections = {sid: _section(text, sid) for sid in SECTION_IDS}
    assert [m for m in re.findall(r'<section id="(\w+)">', text)] == SECTION_IDS
    assert sections["curves"].count("Plotly.newPlot") == 1  # one task
    aggregate = sections["aggregates"]
    for label in ("iqm", "mean", "median", "optimality_gap"):
        assert f"<th>{label}</th>" in aggregate
    assert re.search(r"<td>ppo</td><td>\d\.\d{3} \[\d\.\d{3}, \d\.\d{3}\]</td>", aggregate)
    assert re.search(r"<td>dqn</td><td>\d\.\d{3} \[", aggregate)
    assert re.search(r"<td>(ppo|dqn)</td><td>(ppo|dqn)</td><td>\d\.\d{3} \[", sections["improvement"])
    assert "Plotly.newPlot" in sections["profiles"]
    breakdown = sections["breakdown"]
    assert "return per agent" in breakdown and "solved per level" in breakdown
    # dqn's final evaluation: return_agent_1 = 5 + 3 + seed, mean over seeds 0 and 1.
    assert "<td>dqn @ CartPole-v1</td><td>agent 1</td><td>8.500 [8.000, 9.000]</td>" in breakdown
    # No eval_levels in its config.json: the levels are numbered.
    assert "<td>dqn @ CartPole-v1</td><td>level 2</td>" in breakdown
    # The GIF of the PPO run's final checkpoint decodes; the synthetic run has no checkpoints.
    episodes = sections["episodes"]
    uris = re.findall(r'src="data:image/gif;base64,([^"]+)"', episodes)
    assert len(uris) == 1 and "checkpoint_000000003.msgpack" in episodes
    import imageio.v3 as iio

    frames = iio.imread(io.BytesIO(base64.b64decode(uris[0])), index=None)
    assert frames.ndim == 4 and frames.shape[0] >= 2 and frames.shape[-1] in (3, 4)
    assert f"{synthetic_dir}: no episode: no checkpoints" in episodes
    config = sections["config"]
    assert "<td>config.learning_rate</td><td>0.0025</td><td>0.001</td>" in config
    assert "<td>config.num_envs</td><td>4</td><td>(absent)</td>" in config
    system = sections["system"]
    assert "1 x cpu (cpu)" in system and f"lamella-agents {versions['lamella-agents']}" in system
    assert re.search(r"\d+\.\d s \(config\.json to last metrics\.json write\)", system)


def _browser():
    """``(chromium, chromedriver)`` paths, or the reason there are none."""
    browser = next(
        (
            found
            for name in ("chromium", "chromium-browser", "google-chrome")
            if (found := shutil.which(name))
        ),
        None,
    )
    driver = shutil.which("chromedriver")
    if browser is None or driver is None:
        return None, (
            "no Chromium and chromedriver on PATH (Debian: apt-get install chromium chromium-driver; "
            ".ci/run installs them)"
        )
    return (browser, driver), ""


def _render(path: str, options: Any, service: Any) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """What the browser drew of the report at ``path`` (per section) and its console log."""
    from selenium import webdriver

    driver = webdriver.Chrome(options=options, service=service)
    try:
        driver.get("file://" + os.path.abspath(path))
        rendered = driver.execute_script(
            """
            const out = {};
            for (const section of document.querySelectorAll('section')) {
              out[section.id] = {
                heading: section.querySelector('h2') ? section.querySelector('h2').innerText : '',
                height: section.getBoundingClientRect().height,
                plots: Array.from(section.querySelectorAll('.js-plotly-plot')).map(g => ({
                  svg: g.querySelectorAll('.main-svg').length,
                  points: (g._fullData || []).map(t => (t.x ? t.x.length : 0) + (t.z ? t.z.length : 0)),
                  drawn: g.querySelectorAll('.scatterlayer .trace, .barlayer .trace, .heatmaplayer image, .hm').length,
                })),
                images: Array.from(section.querySelectorAll('img')).map(i => [i.complete, i.naturalWidth, i.naturalHeight]),
              };
            }
            out.plotly = typeof Plotly !== 'undefined';
            return out;
            """
        )
        log = driver.get_log("browser")
    finally:
        driver.quit()
    return rendered, log


def test_report_in_browser(report):
    found, reason = _browser()
    if found is None:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(f"CI must run the browser test: {reason}")
        pytest.skip(reason)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    browser, driver_path = found
    options = webdriver.ChromeOptions()
    options.binary_location = browser
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"):
        options.add_argument(argument)
    options.add_argument("--window-size=1280,2000")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    # Chromium puts its profile and its singleton socket's folder in TMPDIR: a folder of this test's,
    # removed after it, so nothing is left in /tmp (short: the socket's path has a length limit,
    # which pytest's tmp_path under xdist exceeds).
    with tempfile.TemporaryDirectory(prefix="lamella-browser-") as scratch:
        rendered, log = _render(
            report[0], options, Service(driver_path, env={**os.environ, "TMPDIR": scratch})
        )
    assert rendered.pop("plotly") is True
    assert sorted(rendered) == sorted(SECTION_IDS)  # their order: test_report_content
    for sid, title in lib.SECTIONS:
        assert rendered[sid]["heading"] == title and rendered[sid]["height"] > 40, (sid, rendered[sid])
    for sid in ("curves", "aggregates", "improvement", "profiles", "breakdown"):
        plots = rendered[sid]["plots"]
        assert plots, f"no plot in {sid}"
        for plot in plots:
            assert plot["svg"] > 0 and plot["drawn"] > 0 and sum(plot["points"]) > 0, (sid, plot)
    assert len(rendered["breakdown"]["plots"]) == 2
    images = rendered["episodes"]["images"]
    assert len(images) == 1 and all(
        complete and width > 0 and height > 0 for complete, width, height in images
    )
    errors = [entry for entry in log if entry["level"] in ("SEVERE", "ERROR")]
    assert not errors, errors


def _error(capsys, argv):
    """Run ``python -m lamella.eval ARGV``: ``(status, stderr)``; a traceback fails the test."""
    status = main(argv)
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return status, err


def test_bad_input(tmp_path, capsys, synthetic_dir, versions):
    out = str(tmp_path / "r.html")
    status, err = _error(capsys, ["report", str(tmp_path / "nowhere"), "-o", out])
    assert status == 2 and "nowhere: no such file or directory" in err
    (tmp_path / "empty").mkdir()
    status, err = _error(capsys, ["report", str(tmp_path / "empty"), "-o", out])
    assert status == 2 and "No run log (metrics.json or metrics.csv)" in err
    with pytest.raises(SystemExit) as exit_info:  # no runs at all: argparse's usage error
        main(["report", "-o", out])
    assert exit_info.value.code == 2 and "required: RUN" in capsys.readouterr().err
    # A marl-eval producer's log (episode_return) beside lamella's (mean_episode_return).
    other = _synthetic_run(tmp_path / "mava", versions, algorithm="ippo", metric="episode_return")
    status, err = _error(capsys, ["report", synthetic_dir, other, "-o", out])
    assert status == 2 and "Run logs of different formats" in err and "holds 'mean_episode_return'" in err
    # Run logs written by another lamella-agents version.
    old = _synthetic_run(tmp_path / "old", {**versions, "lamella-agents": "0.0.1"}, algorithm="sac")
    status, err = _error(capsys, ["report", synthetic_dir, old, "-o", out])
    assert status == 2 and "different versions" in err and "--allow-mixed-versions" in err
    status, err = _error(
        capsys, ["report", synthetic_dir, old, "-o", out, "--reps", "20", "--allow-mixed-versions"]
    )
    assert status == 0 and os.path.getsize(out) > 0
    # A damaged config.json, and -o naming a directory.
    broken = _synthetic_run(tmp_path / "broken", versions, algorithm="td3")
    with open(os.path.join(broken, "config.json"), "w") as file:
        file.write("{")
    status, err = _error(capsys, ["report", broken, "-o", out])
    assert status == 2 and "config.json: not valid JSON" in err
    status, err = _error(capsys, ["report", synthetic_dir, "-o", str(tmp_path)])
    assert status == 2 and "is a directory" in err
    # -o onto the run log it reads (or any file that is not a page): it was replaced by the HTML.
    log = os.path.join(synthetic_dir, "metrics.json")
    before = open(log, encoding="utf-8").read()
    status, err = _error(capsys, ["report", synthetic_dir, "-o", log])
    assert status == 2 and "is an existing file that is not an HTML page" in err and "report.html" in err
    assert open(log, encoding="utf-8").read() == before
    # -o below a file: was a FileExistsError / NotADirectoryError traceback.
    status, err = _error(capsys, ["report", synthetic_dir, "-o", os.path.join(log, "r.html")])
    assert status == 2 and "cannot write the report there" in err


def test_sections_without_checkpoints_or_extras(tmp_path, capsys, synthetic_dir, monkeypatch):
    out = str(tmp_path / "r.html")
    assert main(["report", synthetic_dir, "-o", out, "--reps", "20"]) == 0
    text = open(out, encoding="utf-8").read()
    assert "No run directory holds checkpoints" in _section(text, "episodes")
    assert "Only one algorithm (dqn)" in _section(text, "improvement")
    assert "One run directory: nothing to compare" in _section(text, "config")
    # Checkpoints present, the [checkpoints] extra absent: a note naming it.
    os.makedirs(os.path.join(synthetic_dir, "checkpoints"), exist_ok=True)
    try:
        monkeypatch.setitem(sys.modules, "lamella.agents", None)
        assert main(["report", synthetic_dir, "-o", out, "--reps", "20"]) == 0
    finally:
        os.rmdir(os.path.join(synthetic_dir, "checkpoints"))
    text = open(out, encoding="utf-8").read()
    assert (
        "needs lamella-agents; install them with: pip install &#x27;lamella-eval[checkpoints]&#x27;" in text
    )
    # Without plotly (the [report] extra): one line naming the extra, exit status 2.
    monkeypatch.setitem(sys.modules, "plotly", None)
    status, err = _error(capsys, ["report", synthetic_dir, "-o", out])
    assert status == 2 and "pip install 'lamella-eval[report]'" in err


def test_a_run_whose_env_cannot_be_drawn_is_a_note(tmp_path, ppo_run_dir, monkeypatch):
    """An env without a renderer (``Environment.render``'s NotImplementedError, as a user's own
    env may be) leaves a note in the episodes section; the rest of the report is written."""
    import lamella.envs

    def no_renderer(self, state, params=None):
        raise NotImplementedError(f"{self.name} has no renderer")

    monkeypatch.setattr(type(lamella.envs.make("CartPole-v1")[0].unwrapped), "render", no_renderer)
    out = str(tmp_path / "r.html")
    assert main(["report", ppo_run_dir, "-o", out, "--reps", "20"]) == 0
    episodes = _section(open(out, encoding="utf-8").read(), "episodes")
    assert "no episode: the ppo runner cannot draw its episodes (CartPole has no renderer)" in episodes, (
        episodes
    )
    assert "<img" not in episodes


def test_a_run_of_one_seed_is_reported_unnormalised(tmp_path, capsys, versions):
    """One run (``lamella train``'s default of one seed) gives one final score per task, where
    min-max normalisation is undefined: the report shows the scores as they are, says why, and
    leaves out the optimality gap; ``aggregate`` and a reference with low == high still refuse."""
    single = _synthetic_run(tmp_path / "one", versions, seeds=1)
    with open(os.path.join(single, "metrics.json")) as file:
        final = json.load(file)["classic_control"]["CartPole-v1"]["dqn"]["seed_0"]["step_3"]
    score = float(np.mean(final["mean_episode_return"]))
    out = str(tmp_path / "r.html")
    status, err = _error(capsys, ["report", single, "-o", out, "--reps", "20"])
    assert status == 0, err
    text = open(out, encoding="utf-8").read()
    note = (
        f"Not normalised: every final mean_episode_return is the same on classic_control/CartPole-v1 "
        f"({score:g}), so min-max normalisation (the default) is undefined there"
    )
    aggregates = _section(text, "aggregates")
    assert note in aggregates and note in _section(text, "profiles")
    cell = f"{score:.3f} [{score:.3f}, {score:.3f}]"
    assert f"<td>dqn</td><td>{cell}</td><td>{cell}</td><td>{cell}</td></tr>" in aggregates, aggregates
    assert "<th>optimality_gap</th>" not in aggregates and "no optimality gap" in aggregates
    assert "Plotly.newPlot" in aggregates and "Plotly.newPlot" in _section(text, "profiles")
    status, err = _error(capsys, ["aggregate", single, "--no-plots", "--out-dir", str(tmp_path / "eval")])
    assert status == 2 and "low == high" in err and "--normalize none" in err
    reference = tmp_path / "reference.json"
    reference.write_text(json.dumps({"CartPole-v1": [10.0, 10.0]}))
    status, err = _error(capsys, ["report", single, "-o", out, "--normalize", str(reference)])
    assert status == 2 and "has low == high == 10.0" in err


def test_breakdown_names_the_levels_its_config_names(tmp_path, capsys, versions):
    """A UED run's per-level keys (``solved_level_<i>``) are its ``eval_levels``, in order: the
    breakdown names them; a config whose levels do not match the log's keeps "level i"."""
    named = _synthetic_run(
        tmp_path / "ued", versions, settings={"eval_levels": ["random", "SixteenRooms", "Labyrinth"]}
    )
    other = _synthetic_run(
        tmp_path / "short", versions, algorithm="plr", settings={"eval_levels": ["random"]}
    )
    out = str(tmp_path / "r.html")
    status, err = _error(capsys, ["report", named, other, "-o", out, "--reps", "20"])
    assert status == 0, err
    breakdown = _section(open(out, encoding="utf-8").read(), "breakdown")
    for i, name in enumerate(("random", "SixteenRooms", "Labyrinth")):
        assert f"<td>dqn @ CartPole-v1</td><td>{name}</td>" in breakdown
        assert f"<td>plr @ CartPole-v1</td><td>level {i}</td>" in breakdown
    assert "<td>dqn @ CartPole-v1</td><td>level" not in breakdown
    assert "<td>dqn @ CartPole-v1</td><td>agent 0</td>" in breakdown  # agents stay numbered
    # More dqn runs (seeds 2, 3) evaluated on other levels: not pooled with the first, a note.
    more = _synthetic_run(tmp_path / "more", versions, settings={"eval_levels": ["random", "a", "b"]})
    with open(os.path.join(more, "metrics.json")) as file:
        data = json.load(file)
    runs = data["classic_control"]["CartPole-v1"]["dqn"]
    data["classic_control"]["CartPole-v1"]["dqn"] = {"seed_2": runs["seed_0"], "seed_3": runs["seed_1"]}
    with open(os.path.join(more, "metrics.json"), "w") as file:
        json.dump(data, file)
    status, err = _error(capsys, ["report", named, more, "-o", out, "--reps", "20"])
    assert status == 0, err
    breakdown = _section(open(out, encoding="utf-8").read(), "breakdown")
    assert (
        "dqn @ CartPole-v1: not shown, its runs hold different levels (random in 4, SixteenRooms in 2, "
        "a in 2, Labyrinth in 2, b in 2 runs)" in breakdown
    ), breakdown[:300]


def test_aggregate_does_not_import_the_report(tmp_path, synthetic_dir):
    """``lamella eval aggregate`` stays as fast to start as before: no plotly, no report module,
    and no JAX on an input this small (the NumPy bootstrap; issue 12's cold start)."""
    code = (
        "import sys\nfrom lamella.eval.__main__ import main\n"
        f"assert main(['aggregate', {synthetic_dir!r}, '--no-plots', '--out-dir', {str(tmp_path)!r}]) == 0\n"
        "assert 'plotly' not in sys.modules and 'lamella.eval._src.report' not in sys.modules\n"
        "assert 'jax' not in sys.modules, 'a small aggregation imported JAX'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
