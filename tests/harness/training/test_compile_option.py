"""`compile=true` compiles the model in place (same parameters and checkpoint keys); anything
but a boolean is refused before training. A compiled step is not run here: compiling takes
about a minute on two cores (the benchmark measures it: `python -m studies.bench --compile`)."""

import pytest

from harness.config.command_line import check_overrides
from harness.config.hashing import config_hash
from harness.config.refusal import BadInput
from harness.training.build import build

SMALL = ["task.seq_len=16", "task.num_kv_pairs=2", "data.num_train=64", "data.num_val=8",
         "data.num_test=8", "logger=none"]  # fmt: skip


def test_compile_true_compiles_the_model_in_place(make_cfg) -> None:
    eager, compiled = (build(make_cfg([*SMALL, f"compile={flag}"])) for flag in ("false", "true"))
    assert eager.model._compiled_call_impl is None
    assert compiled.model._compiled_call_impl is not None
    assert compiled.module.model is compiled.model
    assert list(compiled.model.state_dict()) == list(eager.model.state_dict())


def test_compile_does_not_change_the_config_hash(make_cfg) -> None:
    """Compiled and eager runs are the same experiment: a sweep resumes across the switch."""
    assert config_hash(make_cfg(["compile=true"])) == config_hash(make_cfg(["compile=false"]))


def test_compile_must_be_a_boolean() -> None:
    """Hydra's schema types it: OmegaConf's words for a boolean (`yes`, `on`) pass, any other
    value is refused in one line before training."""
    with pytest.raises(
        BadInput, match="compile=maybe is refused: Value 'maybe' is not a valid bool"
    ):
        check_overrides(["compile=maybe"])
