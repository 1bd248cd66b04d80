"""`tests/code_lines.py`, the code-line counter behind the budgets (docs/development.md), on a
sample whose code lines are known; and the rule it checks that holds today: no module outside
tests/ over 400 lines."""

from pathlib import Path

from tests.code_lines import code_lines, long_modules

REPO = Path(__file__).resolve().parents[1]

SAMPLE = '''"""A module docstring
over two lines."""

import os  # a comment

X = 1
"""An attribute docstring."""


def f(a: int) -> str:
    """A function docstring."""
    # a comment line
    text = """a string that is code,
on two lines"""
    return text + str(a)
'''


def test_code_lines_skip_docstrings_comments_and_blanks() -> None:
    # import, X = 1, def, text = (2 lines), return
    assert code_lines(SAMPLE) == 6


def test_no_module_outside_tests_is_over_400_lines() -> None:
    assert long_modules(REPO) == {}
