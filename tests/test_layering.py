"""Imports point downward only: `common` <- `tasks`, `models` <- `harness` <- `studies`.

`tasks` and `models` never import `harness` (or `studies`) and never import each other;
`common` imports none of them; `harness` never imports `studies`."""

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("common", "tasks", "models", "harness", "studies")
FORBIDDEN = {
    "common": {"tasks", "models", "harness", "studies"},
    "tasks": {"models", "harness", "studies"},
    "models": {"tasks", "harness", "studies"},
    "harness": {"studies"},
    "studies": set(),
}


def imported_packages(path: Path) -> set[str]:
    """Top-level names of every module `path` imports (absolute imports)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


@pytest.mark.parametrize("package", PACKAGES)
def test_package_imports_only_downward(package: str) -> None:
    offences = {
        str(path.relative_to(REPO)): sorted(imported_packages(path) & FORBIDDEN[package])
        for path in sorted((REPO / package).rglob("*.py"))
    }
    assert not {k: v for k, v in offences.items() if v}


def test_the_check_sees_a_forbidden_import(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("import torch\nfrom harness.train import run\nfrom . import sibling\n")
    assert imported_packages(module) == {"torch", "harness"}
