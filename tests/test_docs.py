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


# --- every repository path the README and docs/ name exists ---------------------------------

DOCS = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
PATH_ENDINGS = (".py", ".md", ".yaml", ".png", ".json", ".csv", ".txt")
NOT_PATHS = re.compile(r"://|[*<>{}$~=\s]|^-")
"""URLs, globs, `<placeholders>`, shell (`$ ...`, `~/...`), overrides (`key=value`), options."""
RUN_OUTPUTS = ("outputs/", "multirun/", "bench_out/", "wandb/")
"""Folders that runs create; the docs name files in them that a fresh checkout does not hold."""
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
CODE_SPAN = re.compile(r"(?<!`)`([^`\n]+)`(?!`)")
CODE_BLOCK = re.compile(r"^```.*?^```", re.S | re.M)


def prose(text: str) -> str:
    """`text` without fenced and indented code blocks (commands, layouts, console output)."""
    text = CODE_BLOCK.sub("", text)
    return "\n".join(line for line in text.splitlines() if not line.startswith("    "))


def product_text() -> str:
    """The code and configs: a bare file name the docs use is either in the repository or a
    name this code writes or reads (`results.json`, `summary.jsonl`)."""
    folders = ("common", "conf", "harness", "models", "studies", "tasks")
    files = [REPO / "run.py", *(p for f in folders for p in (REPO / f).rglob("*.*"))]
    return "\n".join(p.read_text() for p in files if p.suffix in (".py", ".yaml"))


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    headings = re.findall(r"^#+\s+(.*)$", CODE_BLOCK.sub("", path.read_text()), re.M)
    return {slug(h) for h in headings}


def named_paths(text: str, here: Path) -> list[tuple[str, bool]]:
    """(path, is a link) for every link in `text` (the page `here`) and every code span that
    looks like a repo path: one word with a `/` under a folder that exists, or a file type of
    the repository at its end."""
    text = prose(text)
    links = [(target, True) for target in LINK.findall(text) if "://" not in target]
    spans = []
    for span in CODE_SPAN.findall(text):
        span = span.split("::")[0].removeprefix("./")
        if NOT_PATHS.search(span) or span.startswith(RUN_OUTPUTS):
            continue
        top = span.split("/")[0]
        under_a_folder = "/" in span and any((base / top).exists() for base in (REPO, here.parent))
        if under_a_folder or span.endswith(PATH_ENDINGS):
            spans.append((span, False))
    return links + spans


def broken(here: Path, target: str, is_link: bool, product: str) -> str | None:
    """Why `target`, named in the page `here`, does not resolve; None when it does. A link is
    relative to the page; a code span to the page's folder or the repository's root."""
    name, _, anchor = target.partition("#")
    if is_link:
        where = (here.parent / name).resolve() if name else here
        if not where.exists():
            return "no such file"
        if anchor and where.suffix == ".md" and anchor not in anchors(where):
            return f"no heading #{anchor} in {where.relative_to(REPO)}"
        return None
    if any((base / name).exists() for base in (REPO, here.parent)):
        return None
    bare = "/" not in name.rstrip("/")
    if bare and (any(REPO.rglob(name)) or name in product or Path(name).stem in product):
        return None
    return "no such file"


def test_every_path_the_docs_name_exists() -> None:
    product = product_text()
    found, checked = {}, 0
    for path in DOCS:
        for target, is_link in named_paths(path.read_text(), path):
            checked += 1
            why = broken(path, target, is_link, product)
            if why:
                found[f"{path.relative_to(REPO)}: {target}"] = why
    assert checked > 100  # the README and docs/ were read
    assert not found, "\n".join(f"{where}: {why}" for where, why in sorted(found.items()))


def test_the_path_finder_tells_paths_from_keys_commands_and_outputs() -> None:
    here = REPO / "docs" / "page.md"  # a page of docs/ (never written)
    text = (
        "`harness/train.py` `tests/no_such_test.py` [found](results/README.md#findings)"
        " [gone](background.md#no-such-heading) [up](../run.py) `results/` `test/acc`"
        " `trainer/global_step` `hydra/launcher=slurm` `conf/task/<name>.yaml` `outputs/a/b.json`"
        " `python -m harness.report` `bench_out/x.csv` `results.json` `no_such_output.json`"
        " [web](https://example.org/a.md)\n"
        "    `in/an/indented/block.py`\n```\n`in/a/fenced/block.py`\n```\n"
    )
    product = product_text()
    why = {t: broken(here, t, link, product) for t, link in named_paths(text, here)}
    assert why == {
        "results/README.md#findings": None,
        "background.md#no-such-heading": "no heading #no-such-heading in docs/background.md",
        "../run.py": None,
        "harness/train.py": None,
        "tests/no_such_test.py": "no such file",
        "results/": None,
        "results.json": None,
        "no_such_output.json": "no such file",
    }


# --- the README's tables and docs/tasks.md agree with the registries and conf/ ---------------


def section(text: str, heading: str) -> str:
    """The body of the section `heading` (a whole heading line) up to the next heading of the
    same or a higher level."""
    level = heading.split(" ")[0]
    body = text.split(f"\n{heading}\n", 1)[1]
    return re.split(rf"\n#{{1,{len(level)}}} ", body, maxsplit=1)[0]


def first_cells(text: str) -> list[str]:
    """The first cell of every table row of `text` (header and rule rows excluded)."""
    rows = [line.split("|")[1].strip() for line in text.splitlines() if line.startswith("|")]
    return [cell for cell in rows[2:] if not set(cell) <= set("-: ")] if rows else []


def test_the_tables_of_tasks_and_mixers_name_registered_ones() -> None:
    """The README's task table and docs/models.md hold no stale row; the full lists are the
    registries' own (`python -m models`, `python -m tasks`, `--help`), so a new entry needs
    no row."""
    from models import MIXERS
    from tasks import TASKS

    readme = (REPO / "README.md").read_text()
    models_page = (REPO / "docs" / "models.md").read_text()
    for table, registry in ((section(readme, "## Tasks"), TASKS), (models_page, MIXERS)):
        own = re.split(r"\n#+ ", table, maxsplit=1)[0]  # before subsections
        names = [re.match(r"\[`(\w+)`\]", cell) for cell in first_cells(own)]
        assert names and all(names), registry.kind
        assert {m.group(1) for m in names} <= set(registry.names()), registry.kind


def test_the_generated_tables_list_every_registered_entry() -> None:
    from models import MIXERS
    from models.__main__ import mixer_table
    from tasks import TASKS
    from tasks.__main__ import task_table

    for table, registry in ((mixer_table(), MIXERS), (task_table(), TASKS)):
        names = [re.match(r"\[`(\w+)`\]", cell) for cell in first_cells(table)]
        assert [m.group(1) for m in names] == registry.names()
    softmax = next(line for line in mixer_table(64, 64).splitlines() if "[`softmax`]" in line)
    assert softmax.endswith("| 8,192 | 64 |")  # K and V of 64 tokens x 64 dims; 64 kept


def test_docs_tasks_states_the_defaults_of_the_task_options() -> None:
    from harness.config.group_nodes import group_nodes
    from tasks import TASKS

    page = (REPO / "docs" / "tasks.md").read_text()
    documented = [name for name in TASKS.names() if f"## `{name}`" in page]
    assert documented
    for name in documented:
        conf = group_nodes("task")[name]
        lines = section(page, f"## `{name}`").splitlines()
        rows = [line.split("|") for line in lines if line.startswith("| `")]
        table = {row[1].strip(" `"): row[2].strip() for row in rows}
        assert table, name
        shown = {key: "null" if conf[key] is None else str(conf[key]) for key in table}
        assert table == shown, name
