"""The committed laws as references (`docs/results/references.txt`): each listed folder under
docs/results/ is read in place, and its records that share the sweep's capacity protocol
(`MATCH`: the task and its vocabulary, the protocol and its multiple of R, the step budget,
the layers and the width) and are not the sweep's own (by config hash) join the report as
reference cells: drawn beside the sweep's in the capacity figure, in a faded tint of their
mixer's colour and named for their folder and budget (`linear (reference:
capacity_law/budget_4000, 4000 steps)`), and as rows whose `source` is `reference` in
`laws.csv` and `pairs.csv`.
`capacity.max_load` is not matched: it only extends the loads past m R."""

from pathlib import Path

from matplotlib.colors import to_rgb

from harness.config.group_nodes import ROOT
from harness.records.sweep import load_sweep
from harness.report import look
from harness.report.capacity_law import PROTOCOL
from harness.report.frame import as_key, clean_rows

RESULTS = ROOT / "docs" / "results"
LISTED = RESULTS / "references.txt"
MATCH = (*PROTOCOL, "capacity.bound_multiple", "task.vocab_size", "backbone.d_model")
"""The settings a reference's record shares with the sweep's to be read beside it."""
FADE = 0.55
"""How far toward white a reference's markers and lines are drawn from its mixer's colour."""


def protocol(row: dict) -> str:
    return as_key([row.get(k) for k in MATCH])


def listed(path: Path | None = None) -> list[str]:
    """The folders `path` (default `LISTED`) names under `RESULTS`, comments and blank lines
    aside."""
    text = (path or LISTED).read_text()
    lines = (line.split("#", 1)[0].strip() for line in text.splitlines())
    return [line for line in lines if line]


def reference_rows(own: list[dict], path: Path | None = None) -> list[tuple[str, list[dict]]]:
    """(folder, its rows) of each listed folder with rows under one of `own`'s capacity
    protocols, `own`'s config hashes left out (none left where the folder is `own`'s); no
    folder where `own` ran without the protocol."""
    protocols = {protocol(r) for r in own if r.get("capacity.protocol")}
    hashes = {r.get("config_hash") for r in own}
    found = []
    for folder in listed(path) if protocols else []:
        records = RESULTS / folder / "records"
        rows = clean_rows(load_sweep(records if records.is_dir() else RESULTS / folder))
        matched = [r for r in rows if protocol(r) in protocols]
        if matched:
            found.append((folder, [r for r in matched if r.get("config_hash") not in hashes]))
    return found


def reference_name(mixer: str, folder: str, steps: object) -> str:
    """`linear (reference: capacity_law/budget_4000, 4000 steps)`, styled as a faded `mixer`
    in every figure (`look.style`)."""
    name = f"{mixer} (reference: {folder}, {steps} steps)"
    colour, marker = look.style(mixer)
    faded = tuple(c + FADE * (1 - c) for c in to_rgb(colour))
    look.HANDED[name] = (faded, marker)
    return name
