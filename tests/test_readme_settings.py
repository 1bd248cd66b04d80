"""The README's settings tables (`| key | default | ... |`) say what the code declares: every key
they name is a setting, and the default they give is its default (`harness.config.settings` for the
run-level settings, `models.backbone.LanguageModel` for `backbone.*`, the composed default
config for a group's keys such as `task.seq_len`); a `group=option` row names an option that
exists."""

import inspect
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from omegaconf import OmegaConf

from harness.config.compose import compose_config
from harness.config.group_nodes import group_options
from harness.config.settings import defaults
from models.backbone import LanguageModel

README = Path(__file__).resolve().parents[1] / "README.md"
NOT_GIVEN = object()


def tables(text: str) -> list[tuple[str, list[list[str]]]]:
    """(the heading above it, its rows of cells) of every Markdown table whose header begins
    `| key | default |`; rows are split on unescaped `|`, the header and rule left out."""
    found, heading, lines = [], "", text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i].strip()
        if line.startswith("#"):
            heading = line.lstrip("#").strip()
        if line.startswith("|") and cells(line)[:2] == ["key", "default"]:
            rows = []
            i += 2  # the header and its |---| rule
            while i < len(lines) and lines[i].strip().startswith("|"):
                rows.append(cells(lines[i]))
                i += 1
            found.append((heading, rows))
            continue
        i += 1
    return found


def cells(line: str) -> list[str]:
    parts = re.split(r"(?<!\\)\|", line.strip().strip("|"))
    return [p.strip() for p in parts]


def settings_table() -> list[list[str]]:
    for heading, rows in tables(README.read_text()):
        if "setting" in heading.lower():
            return rows
    pytest.fail(
        "README.md has no `| key | default | what it does |` table under a Settings heading"
    )


def backticked(cell: str) -> list[str]:
    return re.findall(r"`([^`]+)`", cell)


def default_of(key: str) -> Any:
    """The code's default of a dotted key, or NOT_GIVEN when it is not a setting."""
    declared = defaults()
    if key in declared:
        return declared[key]
    if key.startswith("backbone."):
        parameter = inspect.signature(LanguageModel).parameters.get(key.split(".", 1)[1])
        return NOT_GIVEN if parameter is None else parameter.default
    return OmegaConf.select(
        compose_config(), key, default=NOT_GIVEN, throw_on_resolution_failure=False
    )


def same_default(cell: str, default: Any) -> bool:
    """The README's cell gives `default`: the same YAML value (`0.002`, `true`, `null`,
    `32-true`); for an interpolated default (`${seed}`, `${oc.env:RECALL_HARNESS_CACHE,...}`)
    the cell names what it refers to first (the key, or the environment variable)."""
    if isinstance(default, str) and "${" in default:
        names = re.findall(r"oc\.env:(\w+)", default) or re.findall(r"\$\{([\w.]+)\}", default)
        return names[0] in cell
    text = cell.replace("`", "").strip()
    try:
        return yaml.safe_load(text) == default
    except yaml.YAMLError:
        return text == str(default)


def rows_of_every_table() -> list[list[str]]:
    return [row for _, rows in tables(README.read_text()) for row in rows]


def test_the_readme_has_a_settings_table() -> None:
    rows = settings_table()
    assert rows and all(backticked(row[0]) for row in rows)


@pytest.mark.parametrize("row", rows_of_every_table(), ids=lambda row: row[0])
def test_each_row_names_a_setting_with_its_default(row: list[str]) -> None:
    keys, given = backticked(row[0]), row[1]
    assert keys, f"{row[0]}: no `key`"
    values = [v.strip() for v in given.split(",")] if len(keys) > 1 else [given]
    assert len(values) == len(keys) or not given, f"{row[0]}: {given!r}"
    for index, key in enumerate(keys):
        if "=" in key:  # a config group's option: `backbone=zoology`, `debug=smoke`
            group, option = key.split("=", 1)
            assert option in group_options()[group], key
            continue
        default = default_of(key)
        assert default is not NOT_GIVEN, f"README names `{key}`, which is not a setting"
        if given:
            assert same_default(values[index], default), (key, values[index], default)


def test_the_settings_table_is_read_as_written() -> None:
    """The parser on a table written as the README writes it."""
    text = "## Settings\n\n| key | default | what it does |\n|---|---|---|\n"
    text += "| `optim.lr` | 0.002 | peak `a \\| b` |\n| `plateau.stop` | true | x |\n\nafter\n"
    ((heading, rows),) = tables(text)
    assert heading == "Settings" and [r[:2] for r in rows] == [
        ["`optim.lr`", "0.002"],
        ["`plateau.stop`", "true"],
    ]
    assert same_default("0.002", 0.002) and same_default("`null`", None)
    assert not same_default("0.02", 0.002) and same_default(
        "`$RECALL_HARNESS_CKPT`", defaults()["checkpoint.dir"]
    )
