"""The layer rule: a package imports only lamella packages below it that its pyproject declares."""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LAYER = {"envs": 0, "buffers": 1, "agents": 1, "marl": 2, "ued": 2, "gcrl": 2, "eval": 3}
# Third-party imports lamella-envs may use at module level (extras are imported lazily).
ENVS_RUNTIME = {"jax", "numpy"}
ENVS_OPTIONAL = {"imageio", "gymnasium"}


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
    return {re.split(r"[<>=!\[ ;~]", dep, maxsplit=1)[0].strip().lower() for dep in deps}


def _declared(package: str) -> set[str]:
    project = tomllib.loads((ROOT / "packages" / package / "pyproject.toml").read_text())["project"]
    return _names(list(project.get("dependencies", [])))


def _extras(package: str) -> set[str]:
    """Distributions only an extra declares (``lamella-eval[checkpoints]``)."""
    project = tomllib.loads((ROOT / "packages" / package / "pyproject.toml").read_text())["project"]
    optional = project.get("optional-dependencies", {})
    return _names([dep for deps in optional.values() for dep in deps]) - _declared(package)


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


def test_envs_needs_only_jax_and_numpy() -> None:
    assert _declared("envs") <= {"jax", "numpy", "chex"}, _declared("envs")
    for path, line, name, top_level in _imports("envs"):
        root = name.split(".")[0]
        if root in {"lamella", "__future__"} or root in ENVS_RUNTIME:
            continue
        if root in ENVS_OPTIONAL:
            assert not top_level, f"{path.relative_to(ROOT)}:{line}: optional {root} imported at module level"
            continue
        module = __import__("sys").stdlib_module_names
        assert root in module, f"{path.relative_to(ROOT)}:{line}: lamella-envs imports {name}"


def test_no_namespace_init() -> None:
    for package in _packages():
        assert not (ROOT / "packages" / package / "src" / "lamella" / "__init__.py").exists(), package
