"""The command line answers before the heavy imports: `python run.py --help`, a mistyped option
(`model=nosuch`), a mistyped key and a bad value (`threads=two`) are answered without importing
torch or Lightning, and so are `python -m harness.report --help`, a precision Lightning does
not take (its list declared in `harness.config.settings`, held to Lightning's by a test) and,
where torch is a CPU build, a GPU asked for (`trainer=gpu`, `trainer=ddp`). Each command runs
in a fresh interpreter with `-X importtime`, whose log names every module the process
imported."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

from harness.config.devices import cpu_build
from tests.conftest import REPO, cli_env

HEAVY = ("torch", "lightning")
RUN = str(REPO / "run.py")

COMMANDS = {
    "help": ([RUN, "--help"], 0, HEAVY),
    "unknown option": ([RUN, "model=nosuch"], 2, HEAVY),
    "bad value": ([RUN, "threads=two"], 2, HEAVY),
    "unknown key": ([RUN, "model.head_k_dimm=2"], 2, HEAVY),
    "report help": (["-m", "harness.report", "--help"], 0, HEAVY),
    "no GPU": ([RUN, "trainer=gpu"], 2, HEAVY if cpu_build() else ()),
    "no GPU for ddp": ([RUN, "trainer=ddp"], 2, HEAVY if cpu_build() else ()),
    "Lightning's choices": ([RUN, "trainer.precision=bogus"], 2, HEAVY),
    "a declared choice": ([RUN, "optim.schedule=linear"], 2, HEAVY),
}
"""name -> (arguments after `python -X importtime`, exit code, modules it must not import)."""


def imported(log: str) -> set[str]:
    """The top-level packages an `-X importtime` log says the process imported."""
    return {m.group(1) for m in re.finditer(r"^import time:.*\|\s+([\w]+)$", log, re.M)}


@pytest.fixture(scope="module")
def answers(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[int, str]]:
    """Every command's (exit code, stderr), started together (each takes seconds), each in a
    folder of its own: two runs started in one second in one folder share Hydra's run folder
    (`outputs/<date>/<time>`), and the second would find it made by the first."""
    cwds: dict[str, Path] = {name: tmp_path_factory.mktemp("startup") for name in COMMANDS}
    logs = {name: cwd / "stderr.log" for name, cwd in cwds.items()}
    procs = {}
    for name, (args, _, _) in COMMANDS.items():
        with logs[name].open("w") as log:
            procs[name] = subprocess.Popen(
                [sys.executable, "-X", "importtime", *args],
                cwd=REPO if args[0] == "-m" else cwds[name],
                env=cli_env(cwds[name]),
                stdout=subprocess.DEVNULL,
                stderr=log,
            )
    out = {name: (p.wait(timeout=300), logs[name].read_text()) for name, p in procs.items()}
    assert not any((cwd / "outputs").exists() for cwd in cwds.values())  # refused: no folder
    return out


@pytest.mark.parametrize("name", list(COMMANDS))
def test_the_command_line_answers_before_torch_and_lightning(answers, name: str) -> None:
    code, log = answers[name]
    _, expected_code, forbidden = COMMANDS[name]
    assert code == expected_code, log[-2000:]
    assert not imported(log) & set(forbidden)
    if expected_code == 2:
        (line,) = [s for s in log.splitlines() if not s.startswith("import time:")]
        assert line.startswith("error: ") and " is " in line
