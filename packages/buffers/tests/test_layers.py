"""lamella-buffers imports no other lamella package, and not flax."""

import ast
import pathlib

import lamella.buffers as lb

SOURCE = pathlib.Path(lb.__file__).parent


def imported_modules():
    for path in SOURCE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                yield path, from_names(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module:
                yield path, [node.module]


def from_names(names):
    return list(names)


def test_no_upward_or_sideways_imports():
    for path, modules in imported_modules():
        for module in modules:
            assert not module.startswith("flax"), f"{path} imports {module}"
            if module.startswith("lamella"):
                assert module.startswith("lamella.buffers"), f"{path} imports {module}"


def test_public_names_are_exported():
    assert set(lb.__all__) <= set(dir(lb))
