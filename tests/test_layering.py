"""Imports point downward only: `common` <- `tasks`, `models` <- `harness` <- `studies`.

`tasks` and `models` never import `harness` (or `studies`) and never import each other;
`common` imports none of them; `harness` never imports `studies`. Inside `harness` the wings
import in the order of `WINGS` (a wing imports its own modules and the wings before it): the
readouts are pure functions of numbers, the config knows the command line, the records know the
config, one run's training writes records, and the report reads all of them. The modules left
flat at the top (`api`, `train`, `evaluate`: the entry points) may import every wing, and no
wing imports them."""

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
WINGS = ("readouts", "config", "records", "training", "report")
"""`harness`'s sub-packages, lowest first."""
MOST_FLAT_MODULES = 8


def imported_modules(path: Path) -> set[str]:
    """The dotted names of every module `path` imports (absolute imports)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
    return names


def imported_packages(path: Path) -> set[str]:
    """Top-level names of every module `path` imports (absolute imports)."""
    return {name.split(".")[0] for name in imported_modules(path)}


@pytest.mark.parametrize("package", PACKAGES)
def test_package_imports_only_downward(package: str) -> None:
    offences = {
        str(path.relative_to(REPO)): sorted(imported_packages(path) & FORBIDDEN[package])
        for path in sorted((REPO / package).rglob("*.py"))
    }
    assert not {k: v for k, v in offences.items() if v}


def rank(dotted: str) -> int:
    """A harness module's place in the wings' order; the flat modules come last."""
    parts = dotted.split(".")
    return WINGS.index(parts[1]) if len(parts) > 1 and parts[1] in WINGS else len(WINGS)


def test_harness_wings_import_in_order() -> None:
    offences = {}
    for path in sorted((REPO / "harness").rglob("*.py")):
        module = ".".join(path.relative_to(REPO).with_suffix("").parts)
        upward = sorted(
            name
            for name in imported_modules(path)
            if name.startswith("harness.") and rank(name) > rank(module)
        )
        if upward:
            offences[module] = upward
    assert not offences


def test_the_report_does_not_import_training() -> None:
    """The report reads records, not a run's training: what both print (`human_time`, ...)
    lives in `common.human`."""
    offences = {
        str(path.relative_to(REPO)): sorted(
            name for name in imported_modules(path) if name.startswith("harness.training")
        )
        for path in sorted((REPO / "harness" / "report").rglob("*.py"))
    }
    assert not {k: v for k, v in offences.items() if v}


def test_harness_keeps_few_flat_modules() -> None:
    flat = [p.name for p in (REPO / "harness").glob("*.py") if p.name != "__init__.py"]
    wings = {p.name for p in (REPO / "harness").iterdir() if (p / "__init__.py").exists()}
    assert len(flat) <= MOST_FLAT_MODULES, flat
    assert wings == set(WINGS)


@pytest.mark.parametrize("package", ("models", "tasks"))
def test_registered_modules_do_not_import_their_package_back(package: str) -> None:
    """Each registered module takes `register` from its package's registry module, so that the
    package's `__init__` imports its modules and none imports the package back (entry points
    such as `python -m models` or `tasks.export`, which register nothing, may)."""
    modules = sorted((REPO / package).rglob("*.py"))
    registering = [p for p in modules if "@register(" in p.read_text()]
    offences = [str(p.relative_to(REPO)) for p in registering if package in imported_modules(p)]
    assert registering
    assert not offences


def test_the_check_sees_a_forbidden_import(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("import torch\nfrom harness.train import run\nfrom . import sibling\n")
    assert imported_packages(module) == {"torch", "harness"}
    assert rank("harness.report.figures") > rank("harness.records.schema")
    assert rank("harness.train") == len(WINGS)
