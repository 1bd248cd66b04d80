"""The extension contract (README "Extending"): a mixer is its module plus one import line, a
task likewise. In a scratch copy of the repo (the config reads `models/mixers/*.py` and
`tasks/*.py` as source, so a class made in memory is not seen) the test writes a fresh mixer
(ELU+1 linear attention with a fixed decay per head), a one-class subclass of RetNet and a
one-class subclass of Induction, each with its import line and nothing else; then the
suite's generic checks pass on them, the subclass's parameters are its parent's (a mistyped
one is refused before torch, naming them), and a 20-step run of each trains from the
command line."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
COPIED = ["common", "models", "tasks", "harness", "studies", "conf", "tests", "docs"]
SKIPPED = shutil.ignore_patterns("__pycache__", "results", "outputs", "multirun", "wandb")

FRESH_MIXER = '''"""ELU+1 linear attention with a fixed decay per head:
S_t = g S_{t-1} + phi(k_t) v_t^T, o_t = S_t^T phi(q_t), phi = elu + 1."""

import torch
import torch.nn.functional as F

from models.kernels import linear_attention
from models.mixers.base import MatrixStateMixer, State
from models.registry import register


@register("toy_decay")
class ToyDecay(MatrixStateMixer):
    """ELU+1 features, a fixed decay `decay` in every head, no normaliser."""

    def __init__(self, d_model: int, n_heads: int = 2, decay: float = 0.97) -> None:
        super().__init__(d_model, n_heads)
        self.register_buffer("decays", torch.full((n_heads,), decay))

    def features(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        q, k, v = self.split_heads(x)
        return F.elu(q) + 1, (F.elu(k) + 1) * self.head_dim**-1, v

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.features(x)
        o = linear_attention(q, k, v, decay=self.decays, normalize=False, mode="chunk")
        return self.merge_heads(o)

    def step(self, x: torch.Tensor, state: State) -> tuple[torch.Tensor, State]:
        (S,) = state
        q, k, v = self.features(x[:, None])
        o, (S, _) = linear_attention(
            q, k, v, decay=self.decays, normalize=False, mode="recurrent",
            initial_state=(S, S.new_zeros(S.shape[:3])), return_state=True,
        )
        return self.merge_heads(o)[:, 0], (S,)
'''

SUBCLASS_MIXER = '''"""RetNet under another name."""

from models.mixers.retnet import RetNet
from models.registry import register


@register("toy_retnet")
class ToyRetNet(RetNet):
    """RetNet, registered again: its parameters are RetNet's."""
'''

SUBCLASS_TASK = '''"""Induction under another name."""

from tasks.induction import Induction
from tasks.registry import register


@register("toy_induction")
class ToyInduction(Induction):
    """Induction, registered again: its parameters are Induction's."""
'''

# The generic checks: every test parametrised by the registries, on the new names, and the
# tests that compare the registries with what the repo lists (help, README, report, configs).
GENERIC = [
    "tests/models/test_mixers.py",
    "tests/models/test_precision.py",
    "tests/models/test_compile.py",
    "tests/models/test_rank_bound.py",
    "tests/tasks/test_every_task.py",
    "tests/tasks/test_baselines.py",
    "tests/test_configs.py",
    "tests/test_docs.py",
    "tests/harness/config/test_command_line.py",
    "tests/harness/report/test_report.py",
]
SELECTED = (
    "toy or every_registered or readme or help or knows_every or each_registered"
    " or one_colour or group_options"
)


def add_module(root: Path, package: str, name: str, source: str) -> None:
    """Writes `package/name.py` and its import line in `package/__init__.py`."""
    folder = root / package
    (folder / f"{name}.py").write_text(source)
    init = folder / "__init__.py"
    dotted = package.replace("/", ".")
    init.write_text(init.read_text() + f"from {dotted} import {name}  # noqa: E402, F401\n")


def run(root: Path, *args: str, timeout: int = 900) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, *args], cwd=root, capture_output=True, text=True, timeout=timeout
    )


@pytest.fixture(scope="module")
def extended(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A scratch copy of the repo with the three new modules and their import lines."""
    root = tmp_path_factory.mktemp("extended")
    for name in COPIED:
        shutil.copytree(REPO / name, root / name, ignore=SKIPPED)
    for name in ("run.py", "pyproject.toml", "README.md"):
        shutil.copy(REPO / name, root / name)
    add_module(root, "models/mixers", "toy_decay", FRESH_MIXER)
    add_module(root, "models/mixers", "toy_retnet", SUBCLASS_MIXER)
    add_module(root, "tasks", "toy_induction", SUBCLASS_TASK)
    return root


@pytest.mark.slow
def test_the_generic_checks_pass_on_a_new_mixer_and_task(extended: Path) -> None:
    result = run(extended, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider",
                 "-k", SELECTED, *GENERIC)  # fmt: skip
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert "toy_decay" in result.stdout or " passed" in result.stdout


@pytest.mark.slow
@pytest.mark.parametrize(
    ("task", "model"), [("toy_induction", "toy_decay"), ("assoc_recall", "toy_retnet")]
)
def test_a_new_mixer_and_task_train_from_the_command_line(
    extended: Path, task: str, model: str
) -> None:
    out = extended / "outputs" / f"{task}-{model}"
    result = run(extended, "run.py", f"task={task}", f"model={model}", "trainer.max_steps=20",
                 "debug=smoke", "threads=1", f"hydra.run.dir={out}")  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    record = json.loads((out / "results.json").read_text())
    assert record["status"] == "ok"
    assert 0.0 <= record["metrics"]["test/acc"] <= 1.0


def test_a_subclass_takes_its_parents_parameters_and_refusals(extended: Path) -> None:
    result = run(extended, "run.py", "model=toy_retnet", "model.nheads=4")
    assert result.returncode == 2
    line = result.stderr.strip().splitlines()[-1]
    assert "model.nheads" in line and "n_heads" in line, result.stderr
