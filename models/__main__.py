"""`python -m models [d_model] [seq_len]`: every registered mixer as a Markdown table, made from
the registry: its module, what it is (its docstring's first paragraph), the floats its state
holds per layer and its rank bound (docs/background.md, section 17) at its defaults."""

import sys

from common.registry import markdown_table
from models import MIXERS, build_mixer


def mixer_table(d_model: int = 64, seq_len: int = 64) -> str:
    """The table at `d_model` and `seq_len`."""
    rows = []
    for name in MIXERS.names():
        path, what = MIXERS.described(name)
        mixer = build_mixer(name, d_model)
        floats, bound = mixer.state_size(seq_len), mixer.rank_bound(seq_len)
        rows.append([f"[`{name}`]({path})", what, f"{floats:,}", f"{bound:,}"])
    header = ["model", "what", f"state floats (d = {d_model}, T = {seq_len})", "rank bound"]
    return markdown_table(header, rows)


if __name__ == "__main__":
    print(mixer_table(*(int(a) for a in sys.argv[1:3])))
