"""Code lines per wing of the repo, against the budgets of docs/development.md.

A code line is a line that holds a token other than a comment, whitespace or a docstring (the
first statement of a module, class or function when it is a string, or a string statement
right after an assignment, the attribute docstring). Run `python tests/code_lines.py [ROOT]`
for the table (each wing against its budget).
"""

import ast
import io
import sys
import tokenize
from pathlib import Path

BUDGETS = {
    "harness/config": 550,
    "harness/training": 700,
    "harness/records": 350,
    "harness/report": 1000,
    "harness (top-level modules)": 250,
}
"""The most code lines each machinery wing may hold; readouts (the research) have none."""
SCIENCE = ("models", "tasks", "common")
"""The wings `harness/` as a whole may not outgrow, together."""
MAX_MODULE_LINES = 400
"""The most physical lines of any module outside tests/."""


def docstring_lines(tree: ast.AST) -> set[int]:
    """Line numbers covered by docstrings and attribute docstrings in `tree`."""
    lines: set[int] = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if not isinstance(body, list):
            continue
        for i, stmt in enumerate(body):
            is_string = isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant)
            if not (is_string and isinstance(stmt.value.value, str)):
                continue
            first = i == 0 and isinstance(
                node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef
            )
            after_assignment = i > 0 and isinstance(body[i - 1], ast.Assign | ast.AnnAssign)
            if first or after_assignment:
                lines.update(range(stmt.lineno, stmt.end_lineno + 1))
    return lines


def code_lines(source: str) -> int:
    """The number of code lines in `source` (see the module docstring)."""
    skipped = docstring_lines(ast.parse(source))
    blank = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT}
    lines: set[int] = set()
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type in blank or token.type == tokenize.ENDMARKER:
            continue
        rows = range(token.start[0], token.end[0] + 1)
        lines.update(row for row in rows if row not in skipped)
    return len(lines)


def wing_of(path: Path) -> str:
    """The wing a module (relative to the root) belongs to."""
    parts = path.parts
    if parts[0] == "harness":
        return "harness (top-level modules)" if len(parts) == 2 else f"harness/{parts[1]}"
    return parts[0]


def modules(root: Path) -> list[Path]:
    """Every Python module of the repo outside tests/, relative to `root`."""
    found = sorted(p.relative_to(root) for p in root.rglob("*.py"))
    skip = {"tests", "outputs", "multirun", "wandb", ".venv", ".git"}
    return [p for p in found if not skip & set(p.parts)]


def wing_lines(root: Path) -> dict[str, int]:
    """Code lines per wing under `root`."""
    totals: dict[str, int] = {}
    for path in modules(root):
        wing = wing_of(path)
        totals[wing] = totals.get(wing, 0) + code_lines((root / path).read_text())
    return totals


def long_modules(root: Path) -> dict[str, int]:
    """Modules outside tests/ longer than `MAX_MODULE_LINES` physical lines."""
    lengths = {str(p): len((root / p).read_text().splitlines()) for p in modules(root)}
    return {path: n for path, n in lengths.items() if n > MAX_MODULE_LINES}


def main(root: Path) -> None:
    totals = wing_lines(root)
    harness = sum(n for wing, n in totals.items() if wing.startswith("harness"))
    science = sum(totals.get(wing, 0) for wing in SCIENCE)
    for wing, n in sorted(totals.items()):
        budget = BUDGETS.get(wing)
        print(f"{wing:30s} {n:6d}" + (f"  (budget {budget})" if budget else ""))
    print(f"{'harness, all':30s} {harness:6d}  (budget: models + tasks + common = {science})")
    for path, n in long_modules(root).items():
        print(f"over {MAX_MODULE_LINES} lines: {path} ({n})")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[1])
