"""Each `task` and `model` option is its registered class, with the constructor's parameters
and defaults (`harness.config.group_nodes`), and the run-level settings are declared once, in
the schema of `harness.config.settings` (one source of truth each)."""

import ast
import inspect
import re
from pathlib import Path

import pytest
import yaml
from omegaconf import OmegaConf

from harness.config.compose import CONF_DIR as CONF
from harness.config.compose import compose_config
from harness.config.group_nodes import (
    HEADLINE,
    TASK_KEYS,
    group_nodes,
    registered_name,
    signature_defaults,
)
from harness.config.settings import LOGGERS, check_settings, declared, defaults
from models import MIXERS
from models.backbone import LanguageModel
from models.stack import HYBRID, hybrid_layers
from tasks import TASKS


@pytest.mark.parametrize(("group", "registry"), [("task", TASKS), ("model", MIXERS)])
def test_each_registered_class_is_an_option_holding_its_signature(group, registry) -> None:
    """The nodes read from the source (`ast`, torch not imported) are the imported classes'
    `inspect` signatures: every default, in order, `d_model` left to the backbone."""
    nodes = group_nodes(group)
    assert sorted(nodes) == registry.names()
    for name, node in nodes.items():
        assert node["name"] == name
        params = {k: v for k, v in node.items() if k not in ("name", *TASK_KEYS)}
        defaults = {k: v for k, v in registry.defaults(name).items() if k != "d_model"}
        defaults = {k: list(v) if isinstance(v, tuple) else v for k, v in defaults.items()}
        defaults |= HEADLINE.get(name, {})
        assert list(params.items()) == list(defaults.items()), name


def test_a_new_class_with_its_import_is_an_option_of_its_group() -> None:
    """`@register("<name>")` on a class is the whole declaration: its `__init__`'s literal
    defaults are the node (a tuple a list); a default that is not a literal is refused."""
    source = ast.parse(
        'import x\n@MIXERS.register("toy")\nclass Toy(Mixer):\n'
        "    def __init__(self, d_model: int, n: int = 2, sizes=(1, 2), *, mode='chunk'):\n"
        "        pass\n"
    )
    toy = source.body[1]
    assert registered_name(toy) == "toy"
    assert signature_defaults(toy, Path("toy.py")) == {"n": 2, "sizes": [1, 2], "mode": "chunk"}
    computed = ast.parse("class Bad:\n    def __init__(self, n=int('2')):\n        pass\n")
    with pytest.raises(ValueError):
        signature_defaults(computed.body[0], Path("bad.py"))
    assert registered_name(computed.body[0]) is None


def test_a_subclass_that_adds_nothing_takes_its_parents_parameters() -> None:
    """A variant of a mixer or task in a module of its own: one class, a docstring, no
    `__init__`; its node is its parent's, looked up by name across the folder."""
    parent = ast.parse(
        "class RetNet(Mixer):\n    def __init__(self, d_model, n_heads: int = 2, gamma=0.9):\n"
        "        pass\n"
    ).body[0]
    child = ast.parse('@register("zz_echo")\nclass ZzEcho(RetNet):\n    """Echo."""\n').body[0]
    found = signature_defaults(child, Path("zz_echo.py"), {"RetNet": parent, "ZzEcho": child})
    assert found == {"n_heads": 2, "gamma": 0.9}
    with pytest.raises(TypeError, match="ZzEcho has no __init__"):
        signature_defaults(child, Path("zz_echo.py"))


def test_every_task_option_offers_length_generalisation() -> None:
    for name, node in group_nodes("task").items():
        assert node["eval_seq_lens"] == [], name


def test_the_hybrid_yaml_is_a_valid_layer_list_and_nothing_else() -> None:
    """conf/model/hybrid.yaml: the one model that is no registry entry (models.stack)."""
    content = yaml.safe_load((CONF / "model" / f"{HYBRID}.yaml").read_text())
    assert content == {"name": HYBRID, "layers": None}  # required: refused when not given
    with pytest.raises(ValueError, match=r"model\.layers=\[gated_deltanet,softmax\]"):
        hybrid_layers(content["layers"], 2)


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


def yaml_of(*parts: str) -> dict:
    return yaml.safe_load(CONF.joinpath(*parts).read_text()) or {}


def test_the_run_level_settings_are_declared_once_in_the_schema() -> None:
    """conf/config.yaml names the schema first and holds no setting of its own; the default
    trainer and logger add nothing to the declared defaults."""
    config = yaml_of("config.yaml")
    assert config["defaults"][0] == "schema"
    assert set(config) == {"defaults", "hydra"}
    assert yaml_of("trainer", "default.yaml") == {}
    cfg = compose_config()
    for key, default in defaults().items():
        assert OmegaConf.select(cfg, key) == default or "${" in str(default), key


def test_every_logger_option_names_itself() -> None:
    assert sorted(LOGGERS) == sorted(p.stem for p in (CONF / "logger").glob("*.yaml"))
    for name in LOGGERS:
        assert yaml_of("logger", f"{name}.yaml")["name"] == name


@pytest.mark.parametrize("option", sorted(p.stem for p in (CONF / "trainer").glob("*.yaml")))
def test_every_trainer_option_sets_only_declared_keys_to_allowed_values(option: str) -> None:
    cfg = compose_config([f"trainer={option}", "trainer.accelerator=cpu", "trainer.devices=1"])
    check_settings(cfg)
    assert set(cfg.trainer) == {k.split(".", 1)[1] for k in declared() if k.startswith("trainer.")}


@pytest.mark.parametrize("option", sorted(p.stem for p in (CONF / "state_size").glob("favor_*")))
def test_a_favor_state_size_composes_to_the_state_its_header_states(make_cfg, option) -> None:
    """`+state_size=favor_dN` is FAVOR+ with N features, and its header's floats and rank bound
    are the mixer's (H (N d_v + N) and H N), the same as `linear_dN`'s."""
    header = (CONF / "state_size" / f"{option}.yaml").read_text().splitlines()[1]
    floats, bound = (
        int(n) for n in re.findall(r"(\d+) floats of state per layer, rank bound (\d+)", header)[0]
    )
    cfg = make_cfg([f"+state_size={option}"])
    assert cfg.model.name == "favor" and option == f"favor_d{cfg.model.feature_dim}"
    params = {k: v for k, v in OmegaConf.to_container(cfg.model).items() if k != "name"}
    favor = MIXERS.build("favor", d_model=cfg.backbone.d_model, **params)
    linear = MIXERS.build("linear", d_model=cfg.backbone.d_model, feature_dim=cfg.model.feature_dim)
    assert (favor.state_size(64), favor.rank_bound(64)) == (floats, bound)
    assert (linear.state_size(64), linear.rank_bound(64)) == (floats, bound)
