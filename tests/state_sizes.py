"""`python tests/state_sizes.py`: writes `conf/state_size/sizes.csv`, each `conf/state_size/`
option's mixer, floats per layer (convolution windows apart) and rank bound R under the
`capacity_law` preset (one layer of Zoology's block: d_model 64, T = 64), from the mixers
themselves; options whose state grows with the context (a KV cache) are left out.
`harness.config.state_sizes` reads it; `tests/harness/config/test_state_sizes.py` checks it."""

import sys
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness.config.state_sizes import TABLE  # noqa: E402
from models import build_mixer  # noqa: E402

D_MODEL, SEQ_LEN = 64, 64
FIELDS = ("option", "model", "floats", "rank_bound")


def option_model(text: str) -> str:
    """The mixer an option's yaml selects (`- override /model: deltanet`)."""
    defaults = yaml.safe_load(text)["defaults"]
    return next(d["override /model"] for d in defaults if "override /model" in d)


def sizes() -> list[dict]:
    """Each option's row of `FIELDS`, by name."""
    rows = []
    for path in sorted(TABLE.parent.glob("*.yaml")):
        model = option_model(path.read_text())
        mixer = build_mixer(model, D_MODEL, **(yaml.safe_load(path.read_text()).get("model") or {}))
        if mixer.state_size(2 * SEQ_LEN) > mixer.state_size(SEQ_LEN):
            continue
        floats = mixer.state_size(SEQ_LEN) - mixer.conv_state_size()
        found = (path.stem, model, floats, mixer.rank_bound(SEQ_LEN))
        rows.append(dict(zip(FIELDS, found, strict=True)))
    return rows


def table_text(rows: list[dict]) -> str:
    lines = [",".join(FIELDS)] + [",".join(str(r[f]) for f in FIELDS) for r in rows]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    TABLE.write_text(table_text(sizes()))
    print(f"written {TABLE} ({len(sizes())} options)")
