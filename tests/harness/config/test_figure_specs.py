"""The figures a preset declares (`report.figures`): every preset's declaration names keys its
config has, a mistaken declaration is refused naming its key, and the declaration leaves the
config hash alone (it says how records are read, not what a run measures)."""

import pytest
from omegaconf import OmegaConf, open_dict

from harness.config.figure_specs import ACCURACY_FIGURE, STATE, declared_figures, specs_of
from harness.config.group_nodes import CONF_DIR
from harness.config.hashing import config_hash
from harness.config.settings import check_settings

PRESETS = sorted(p.stem for p in (CONF_DIR / "experiment").glob("*.yaml"))


@pytest.mark.parametrize("preset", PRESETS)
def test_every_preset_declares_figures_of_keys_it_has(make_cfg, preset: str) -> None:
    specs = declared_figures(preset)
    assert specs, f"{preset} declares no figures"
    cfg = make_cfg([f"experiment={preset}"])
    for spec in specs:
        keys = [spec.x] if spec.kind == ACCURACY_FIGURE and spec.x != STATE else []
        keys += [*spec.panels, *spec.ticks, *(spec.hue or ())]
        for key in keys:
            assert OmegaConf.select(cfg, key, default="absent") != "absent", (preset, key)


@pytest.mark.parametrize(
    ("figures", "message"),
    [
        ({"a": {"x": 3}}, "report.figures.a.x=3 is invalid: must be a parameter or state"),
        ({"a": {"kind": "pie"}}, "report.figures.a.kind='pie' is invalid: must be one of"),
        ({"a": {"x": "state", "colour": "red"}}, "report.figures.a.colour is invalid"),
        ([1], "report.figures=[1] is invalid: must be a mapping"),
    ],
)
def test_a_mistaken_declaration_is_refused_naming_its_key(figures, message: str) -> None:
    with pytest.raises(ValueError, match="^" + message.replace("[", r"\[").replace("]", r"\]")):
        specs_of(figures)


def test_a_run_checks_its_declaration_and_leaves_it_out_of_the_hash(make_cfg) -> None:
    cfg = make_cfg(["experiment=retrieval_gap"])
    check_settings(cfg)
    before = config_hash(cfg)
    with open_dict(cfg):
        del cfg.report
        assert config_hash(cfg) == before
        cfg.report = {"figures": {"acc_vs_state": {"x": "state", "kind": "bar"}}}
    with pytest.raises(ValueError, match=r"^report.figures.acc_vs_state.kind='bar' is invalid"):
        check_settings(cfg)
