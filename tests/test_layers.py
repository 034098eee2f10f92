"""The layer rule: a package imports only lamella packages below it, and only what its pyproject
declares. Every import counts: module level, inside functions (lazy) and under ``TYPE_CHECKING``."""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# The ranks of DESIGN.md: buffers is layer 0 beside envs (it imports no lamella package).
LAYER = {"envs": 0, "buffers": 0, "agents": 1, "marl": 2, "ued": 2, "gcrl": 2, "eval": 3}
# Import names whose distribution is named differently.
DISTRIBUTION = {"tensorboardX": "tensorboardx", "PIL": "pillow", "yaml": "pyyaml", "sklearn": "scikit-learn"}
# Third-party imports lamella-envs may use at module level (extras are imported lazily).
ENVS_RUNTIME = {"jax", "numpy"}
ENVS_OPTIONAL = {"imageio", "gymnasium", "pettingzoo", "jaxmarl"}


def _packages() -> list[str]:
    return sorted(p.name for p in (ROOT / "packages").iterdir() if (p / "src" / "lamella" / p.name).is_dir())


def _imports(package: str) -> list[tuple[Path, int, str, bool]]:
    """(file, line, imported module, imported at module level) for every import in the package."""
    found = []
    for path in (ROOT / "packages" / package / "src").rglob("*.py"):
        tree = ast.parse(path.read_text(), str(path))
        top_level = {id(node) for node in tree.body}
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
            for name in names:
                found.append((path, node.lineno, name, id(node) in top_level))
    return found


def _names(deps: list[str]) -> set[str]:
    return {re.split(r"[<>=!\[ ;~]", dep, maxsplit=1)[0].strip().lower().replace("_", "-") for dep in deps}


def _project(package: str) -> dict:
    return tomllib.loads((ROOT / "packages" / package / "pyproject.toml").read_text())["project"]


def _declared(package: str) -> set[str]:
    """The distributions a package requires."""
    return _names(list(_project(package).get("dependencies", [])))


def _optional(package: str) -> set[str]:
    """The distributions of its extras (importable only inside functions)."""
    extras = _project(package).get("optional-dependencies", {})
    return _names([dep for deps in extras.values() for dep in deps])


def _extras(package: str) -> set[str]:
    """Distributions only an extra declares (``lamella-eval[checkpoints]``)."""
    return _optional(package) - _declared(package)


@pytest.mark.parametrize("package", _packages())
def test_imports_only_lower_declared_layers(package: str) -> None:
    declared, extras = _declared(package), _extras(package)
    for path, line, name, top_level in _imports(package):
        match = re.match(r"lamella\.(\w+)", name)
        if not match or match.group(1) == package:
            continue
        other = match.group(1)
        where = f"{path.relative_to(ROOT)}:{line} imports {name}"
        assert other in LAYER, f"{where}: unknown lamella package {other!r}"
        assert LAYER[other] < LAYER[package], f"{where}: {other} is not below {package}"
        if f"lamella-{other}" in extras:  # an extra's layer: imported only where the feature runs
            assert not top_level, f"{where}: lamella-{other} comes with an extra; import it inside functions"
            continue
        assert f"lamella-{other}" in declared, f"{where}: lamella-{other} is not in its dependencies"


def test_the_collector_sees_lazy_imports() -> None:
    # lamella-eval imports lamella-agents only inside functions: the rule must see those too.
    lazy = [name for _, _, name, top in _imports("eval") if name.startswith("lamella.agents") and not top]
    assert lazy, "no lazy lamella.agents import found in lamella-eval: the collector misses function bodies"


@pytest.mark.parametrize("package", _packages())
def test_third_party_imports_are_declared(package: str) -> None:
    """Every non-stdlib import names a declared dependency; an extra's only inside functions."""
    declared, optional = _declared(package), _optional(package)
    for path, line, name, top_level in _imports(package):
        root = name.split(".")[0]
        if root in {"lamella", "__future__"} or root in sys.stdlib_module_names:
            continue
        dist = DISTRIBUTION.get(root, root).lower().replace("_", "-")
        where = f"{path.relative_to(ROOT)}:{line} imports {name}"
        if dist in declared:
            continue
        assert dist in optional, f"{where}: {dist} is not in lamella-{package}'s dependencies or extras"
        assert not top_level, f"{where}: {dist} is an optional extra, import it inside the function"


def test_envs_needs_only_jax_and_numpy() -> None:
    assert _declared("envs") <= {"jax", "numpy", "chex"}, _declared("envs")
    for path, line, name, top_level in _imports("envs"):
        root = name.split(".")[0]
        if root in {"lamella", "__future__"} or root in ENVS_RUNTIME:
            continue
        if root in ENVS_OPTIONAL:
            assert not top_level, f"{path.relative_to(ROOT)}:{line}: optional {root} imported at module level"
            continue
        assert root in sys.stdlib_module_names, (
            f"{path.relative_to(ROOT)}:{line}: lamella-envs imports {name}"
        )


def test_no_namespace_init() -> None:
    for package in _packages():
        assert not (ROOT / "packages" / package / "src" / "lamella" / "__init__.py").exists(), package
