"""Each conf/task and conf/model yaml names its registry entry and lists exactly the
constructor's parameters with the constructor's defaults, and conf/config.yaml, conf/trainer/
and conf/logger/ list exactly the declared run-level settings with their declared defaults
(one source of truth each)."""

import inspect
from typing import Any

import pytest
import yaml
from omegaconf import OmegaConf

from harness.config.compose import CONF_DIR as CONF
from harness.config.compose import compose_config
from harness.config.settings import ABSENT, LOGGERS, declared, defaults
from models import MIXERS
from models.backbone import LanguageModel
from models.stack import HYBRID, hybrid_layers
from tasks import TASKS

HARNESS_KEYS = {"task": {"name", "eval_seq_lens", "test", "mixture"}, "model": {"name"}}
HEADLINE = {"assoc_recall": {"num_kv_pairs": [1, 16]}}
"""Where the harness's default differs from the generator's: `python run.py` trains and tests
MQAR over a range of loads (a load curve, README), `build_task("assoc_recall")` one load."""


@pytest.mark.parametrize(
    ("group", "registry", "skip"),
    [("task", TASKS, set()), ("model", MIXERS, {"d_model"})],
)
def test_every_registry_entry_has_a_yaml_matching_its_signature(group, registry, skip) -> None:
    files = {path.stem: path for path in (CONF / group).glob("*.yaml") if path.stem != HYBRID}
    assert sorted(files) == registry.names()
    for name, path in files.items():
        content = yaml.safe_load(path.read_text())
        assert content["name"] == name
        params = {k: v for k, v in content.items() if k not in HARNESS_KEYS[group]}
        defaults = {k: v for k, v in registry.defaults(name).items() if k not in skip}
        defaults |= HEADLINE.get(name, {}) if group == "task" else {}
        assert params == defaults, path


def test_the_hybrid_yaml_is_a_valid_layer_list_and_nothing_else() -> None:
    """conf/model/hybrid.yaml: the one model that is no registry entry (models.stack)."""
    content = yaml.safe_load((CONF / "model" / f"{HYBRID}.yaml").read_text())
    assert content == {"name": HYBRID, "layers": None}  # required: refused when not given
    with pytest.raises(ValueError, match=r"model\.layers=\[gated_deltanet,softmax\]"):
        hybrid_layers(content["layers"], 2)


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


def nested(flat: dict[str, Any]) -> dict[str, Any]:
    """`{"optim.lr": 0.002}` -> `{"optim": {"lr": 0.002}}`."""
    tree: dict[str, Any] = {}
    for key, value in flat.items():
        *groups, name = key.split(".")
        node = tree
        for group in groups:
            node = node.setdefault(group, {})
        node[name] = value
    return tree


def yaml_of(*parts: str) -> dict:
    return yaml.safe_load(CONF.joinpath(*parts).read_text())


def test_config_yaml_lists_the_declared_settings_with_their_defaults() -> None:
    declared_tree = nested(defaults())
    own = {k: v for k, v in yaml_of("config.yaml").items() if k not in ("defaults", "hydra")}
    assert own == {k: v for k, v in declared_tree.items() if k not in ("trainer", "logger")}


def test_the_default_trainer_and_logger_are_the_declared_ones() -> None:
    declared_tree = nested(defaults())
    assert yaml_of("trainer", "default.yaml") == declared_tree["trainer"]
    assert yaml_of("logger", "wandb.yaml") == declared_tree["logger"]
    assert sorted(LOGGERS) == sorted(p.stem for p in (CONF / "logger").glob("*.yaml"))
    for name in LOGGERS:
        assert yaml_of("logger", f"{name}.yaml")["name"] == name


@pytest.mark.parametrize("option", sorted(p.stem for p in (CONF / "trainer").glob("*.yaml")))
def test_every_trainer_option_sets_only_declared_keys_to_allowed_values(option: str) -> None:
    trainer = compose_config([f"trainer={option}"]).trainer
    settings = declared()
    for key, value in OmegaConf.to_container(trainer).items():
        assert f"trainer.{key}" in settings, f"conf/trainer/{option}.yaml: {key} is not declared"
        settings[f"trainer.{key}"].check(value)


def test_keys_absent_by_default_are_not_in_the_default_config() -> None:
    cfg = compose_config()
    for key, setting in declared().items():
        present = OmegaConf.select(cfg, key, default=ABSENT) is not ABSENT
        assert present == (setting.default is not ABSENT), key


def test_the_composed_config_holds_the_yaml_keys_and_no_other() -> None:
    """The declaration checks a composed config and adds nothing to it: the config hash (of
    the resolved config) of a sweep run before it is the hash of the same run after."""
    cfg = OmegaConf.to_container(compose_config(), resolve=False)
    groups = {
        next(iter(entry)) for entry in yaml_of("config.yaml")["defaults"] if isinstance(entry, dict)
    }
    groups = {g.removeprefix("optional ") for g in groups if not g.startswith("override ")}
    groups -= {"experiment", "debug"}  # optional groups, none by default
    own = set(yaml_of("config.yaml")) - {"defaults", "hydra"}
    assert set(cfg) == groups | own
    assert cfg["trainer"] == yaml_of("trainer", "default.yaml")
