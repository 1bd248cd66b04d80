"""Each conf/task and conf/model yaml names its registry entry and lists exactly the
constructor's parameters with the constructor's defaults (one source of truth)."""

import inspect
from pathlib import Path

import pytest
import yaml

from models import MIXERS
from models.backbone import LanguageModel
from tasks import TASKS

CONF = Path(__file__).resolve().parents[1] / "conf"
HARNESS_KEYS = {"task": {"name", "eval_seq_lens"}, "model": {"name"}}


@pytest.mark.parametrize(
    ("group", "registry", "skip"),
    [("task", TASKS, set()), ("model", MIXERS, {"d_model"})],
)
def test_every_registry_entry_has_a_yaml_matching_its_signature(group, registry, skip) -> None:
    files = {path.stem: path for path in (CONF / group).glob("*.yaml")}
    assert sorted(files) == registry.names()
    for name, path in files.items():
        content = yaml.safe_load(path.read_text())
        assert content["name"] == name
        params = {k: v for k, v in content.items() if k not in HARNESS_KEYS[group]}
        defaults = {k: v for k, v in registry.defaults(name).items() if k not in skip}
        assert params == defaults, path


def test_task_yamls_offer_length_generalisation() -> None:
    for path in (CONF / "task").glob("*.yaml"):
        assert yaml.safe_load(path.read_text())["eval_seq_lens"] == [], path


def test_the_default_backbone_is_the_constructors() -> None:
    signature = inspect.signature(LanguageModel.__init__).parameters
    defaults = {
        k: p.default for k, p in signature.items() if p.default is not inspect.Parameter.empty
    }
    defaults.pop("mixer_params")
    assert yaml.safe_load((CONF / "backbone" / "default.yaml").read_text()) == defaults


def test_the_zoology_backbone_has_no_mlp_and_no_positions() -> None:
    zoology = yaml.safe_load((CONF / "backbone" / "zoology.yaml").read_text())
    assert zoology["mlp_ratio"] == 0 and zoology["pos_emb"] == "none"
    assert zoology["short_conv"] > 0
