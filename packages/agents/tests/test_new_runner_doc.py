"""docs/new-runner.md: its A2C runner, built from lamella-agents' public pieces, runs as written and learns."""

import pathlib
import re

import numpy as np

DOC = pathlib.Path(__file__).resolve().parents[3] / "docs" / "new-runner.md"


def python_blocks(text: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", text, flags=re.DOTALL)


def test_the_worked_example_is_short_runs_and_learns():
    blocks = python_blocks(DOC.read_text())
    assert len(blocks) == 1, f"docs/new-runner.md should hold exactly one Python block, found {len(blocks)}"
    code = blocks[0]
    lines = [line for line in code.splitlines() if line.strip()]
    assert len(lines) < 80, f"the example should take under 80 lines, it takes {len(lines)}"
    namespace: dict = {}
    exec(compile(code, str(DOC), "exec"), namespace)
    returns = np.asarray(namespace["returns"])
    assert returns.shape == (2, namespace["ITERATIONS"])
    final = returns[:, -100:].mean(axis=1)
    # The doc states: above 100 for both seeds (a random policy scores about 22; 32 seeds measured
    # on jax 0.10.2 and 0.12.1 gave 134 to 370).
    assert np.all(final > 100), f"mean return over the last 100 iterations per seed: {final} (threshold 100)"
