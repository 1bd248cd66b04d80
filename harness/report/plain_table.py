"""Plain-text tables and CSV files for the report and the studies."""

import csv
from collections.abc import Sequence
from pathlib import Path


def format_cell(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return "" if value is None else str(value)


def is_number(value: object) -> bool:
    """Numbers (and blanks) are right-aligned, text left-aligned."""
    return value is None or (isinstance(value, int | float) and not isinstance(value, bool))


def fitting(
    rows: list[dict], columns: Sequence[str], width: int, char: int = 1, pad: int = 2,
    wraps: Sequence[str] = (),
) -> list[str]:  # fmt: skip
    """The columns of `columns`, in their order, that fit side by side in `width`: each takes
    `char` x its longest cell or name + `pad` (a column in `wraps`, whose text wraps, 30
    characters at most); one that would pass `width` is left out and the next is tried."""
    kept, used = [], 0
    for column in columns:
        longest = max(len(column), *(len(format_cell(row.get(column))) for row in rows))
        cost = char * (min(longest, 30) if column in wraps else longest) + pad
        if used + cost <= width:
            kept.append(column)
            used += cost
    return kept


def print_table(rows: list[dict], columns: Sequence[str] | None = None) -> str:
    """Print `rows` as an aligned text table (and return the text)."""
    if not rows:
        print("(no rows)")
        return "(no rows)"
    columns = list(columns or dict.fromkeys(k for row in rows for k in row))
    cells = [[format_cell(row.get(c)) for c in columns] for row in rows]
    widths = [max(len(c), *(len(r[i]) for r in cells)) for i, c in enumerate(columns)]
    numeric = [all(is_number(row.get(c)) for row in rows) for c in columns]

    def line(values: list[str]) -> str:
        padded = [
            v.rjust(w) if n else v.ljust(w) for v, w, n in zip(values, widths, numeric, strict=True)
        ]
        return "  ".join(padded).rstrip()

    lines = [line(columns), "  ".join("-" * w for w in widths)]
    lines += [line(r) for r in cells]
    text = "\n".join(lines)
    print(text)
    return text


def write_csv(rows: list[dict], path: str | Path, columns: Sequence[str] | None = None) -> Path:
    """Write `rows` to `path` as CSV (columns: the union of the rows' keys, in order)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    columns = list(columns or dict.fromkeys(k for row in rows for k in row))
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    return path
