"""Every lamella module imports for the first time inside a JAX trace.

Runners build their pieces when they are called, and some import a module lazily there (lamella-marl's
``MultiAgentObservation`` imports the shaping package); a user who builds a runner inside
``jax.jit`` or ``jax.eval_shape`` then imports it under a trace. Code a module runs at import
must not depend on that: under a trace ``jnp`` returns tracers, so a module-level table built with
``jnp`` fails (``TracerArrayConversionError``: lamella-marl's ``STRATEGIES`` did, 2026-12-07) or
keeps a leaked tracer. One fresh interpreter imports every module of every package inside one
``jax.eval_shape`` and reports each failure and each tracer left in a module's globals.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

PACKAGES = [
    "lamella.envs",
    "lamella.buffers",
    "lamella.agents",
    "lamella.marl",
    "lamella.ued",
    "lamella.gcrl",
    "lamella.eval",
]

SCRIPT = textwrap.dedent(
    """
    import importlib, importlib.util, json, os, sys
    import jax

    packages = json.loads(sys.argv[1])
    names = []
    for package in packages:  # found on disk: importing a package to list it would import it now
        for root in importlib.util.find_spec(package).submodule_search_locations:
            for folder, _, files in os.walk(root):
                for file in sorted(files):
                    if file.endswith(".py") and file != "__main__.py":
                        parts = os.path.relpath(os.path.join(folder, file), root)[:-3].split(os.sep)
                        parts = parts[:-1] if parts[-1] == "__init__" else parts
                        names.append(".".join([package, *parts]))
    before = sorted(name for name in sys.modules if name.startswith("lamella."))
    failed = []

    def import_all(x):
        for name in names:
            try:
                importlib.import_module(name)
            except Exception as error:  # noqa: BLE001 - every failure is reported
                failed.append([name, f"{type(error).__name__}: {str(error).splitlines()[0][:200]}"])
        return x

    jax.eval_shape(import_all, 1.0)
    leaked = []
    for name in names:
        module = sys.modules.get(name)  # None where the import failed
        for key, value in vars(module).items() if module is not None else ():
            values = value.values() if isinstance(value, dict) else value if isinstance(value, (list, tuple)) else [value]
            if any(isinstance(v, jax.core.Tracer) for v in values):
                leaked.append(f"{name}.{key}")
    print(json.dumps({"before": before, "names": names, "failed": failed, "leaked": leaked}))
    """
)


def test_every_module_imports_inside_a_trace():
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, json.dumps(PACKAGES)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["before"] == [], f"imported before the trace, so not checked: {report['before']}"
    assert len(report["names"]) > 150 and "lamella.marl.shaping.strategies" in report["names"]
    assert report["failed"] == [], "\n".join(f"{name}: {error}" for name, error in report["failed"])
    assert report["leaked"] == [], f"tracers left in module globals: {report['leaked']}"
