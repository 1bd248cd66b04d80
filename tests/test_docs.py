"""Every equation, pitfall and exercise that the code, tests, configs or README cite is defined
in `docs/background.md`."""

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BACKGROUND = (REPO / "docs" / "background.md").read_text()
CITED_IN = ("*.py", "*.md", "*.yaml")
CITATION = re.compile(r"\b(eqs?\.|[Pp]itfalls?|Exercises?|Ex\.)\s+(\d+)(?:\s*(?:-|–|to)\s*(\d+))?")
KIND = {"eq.": "eq", "eqs.": "eq", "pitfall": "pitfall", "pitfalls": "pitfall"}
KIND |= {"exercise": "exercise", "exercises": "exercise", "ex.": "exercise"}


def sources() -> list[Path]:
    """The repository's text files (not hidden folders, run outputs or this checker)."""
    skip = {"outputs", "multirun", "wandb", "bench_out"}

    def wanted(path: Path) -> bool:
        parts = path.relative_to(REPO).parts
        hidden = any(part.startswith(".") for part in parts)
        return not hidden and not skip & set(parts) and path != Path(__file__).resolve()

    return [path for pattern in CITED_IN for path in sorted(REPO.rglob(pattern)) if wanted(path)]


def citations(text: str) -> set[tuple[str, int]]:
    """(kind, number) of every "eq. 8-9", "pitfall 2", "Exercise 5", "Ex. 2" in `text`."""
    cited = set()
    for word, first, last in CITATION.findall(text):
        numbers = range(int(first), int(last or first) + 1)
        cited |= {(KIND[word.lower()], n) for n in numbers}
    return cited


def defined() -> set[tuple[str, int]]:
    """Equations tagged "(eq. N)", and the "**Pitfall N:" / "**Exercise N:" paragraphs."""
    eqs = {("eq", int(n)) for n in re.findall(r"\(eq\. (\d+)\)", BACKGROUND)}
    pitfalls = {("pitfall", int(n)) for n in re.findall(r"\*\*Pitfall (\d+):", BACKGROUND)}
    exercises = {("exercise", int(n)) for n in re.findall(r"\*\*Exercise (\d+):", BACKGROUND)}
    return eqs | pitfalls | exercises


def test_background_defines_the_numbering_in_use() -> None:
    expected = {("eq", n) for n in range(1, 13)} | {("pitfall", n) for n in (1, 2, 3)}
    assert defined() == expected | {("exercise", n) for n in range(1, 6)}


def test_every_citation_resolves_in_background() -> None:
    missing = {
        str(path.relative_to(REPO)): sorted(citations(path.read_text()) - defined())
        for path in sources()
    }
    assert len(missing) > 40  # the code, tests, configs and README were all read
    assert not {name: cited for name, cited in missing.items() if cited}


def test_the_citation_parser_reads_ranges_and_kinds() -> None:
    text = "eq. 8-9 and eqs. 2-4, pitfall 2, Exercises 1 to 2, (Ex. 4), Exercise 13"
    assert citations(text) == {("eq", n) for n in (2, 3, 4, 8, 9)} | {
        ("pitfall", 2),
        ("exercise", 1),
        ("exercise", 2),
        ("exercise", 4),
        ("exercise", 13),
    }
    assert ("exercise", 13) not in defined()
