"""Each setting's role is declared once, in its field of the schema (`harness.config.settings`),
and the config hash, the report's points and the migration of older records all follow it:
plumbing and readouts never make a run another one, identity always does."""

import pytest
from omegaconf import OmegaConf

from harness.config.hashing import config_hash, identity_hash
from harness.config.settings import (
    GROUP_ROLES,
    IDENTITY,
    PLUMBING,
    READOUT,
    declared,
    role_of,
)
from harness.report.frame import varied

NOT_IDENTITY = [k for k, s in declared().items() if s.role != IDENTITY]


def test_every_declared_setting_has_one_of_the_three_roles() -> None:
    assert {s.role for s in declared().values()} == {IDENTITY, PLUMBING, READOUT}
    assert role_of("capacity.threshold") == READOUT and role_of("threads") == PLUMBING
    assert role_of("optim.lr") == IDENTITY and role_of("model.head_k_dim") == IDENTITY
    assert role_of("hydra.sweep.dir") == PLUMBING
    assert all(role_of(key) == role for key, role in GROUP_ROLES.items())


@pytest.mark.parametrize("key", [*NOT_IDENTITY, *GROUP_ROLES])
def test_plumbing_and_readouts_leave_the_hash_as_it_is(make_cfg, key: str) -> None:
    resolved = OmegaConf.to_container(make_cfg(["model=deltanet"]), resolve=True)
    before = identity_hash(resolved)
    *sections, name = key.split(".")
    node = resolved
    for section in sections:
        node = node.setdefault(section, {})
    node[name] = "another value"
    assert identity_hash(resolved) == before


@pytest.mark.parametrize(
    "override",
    ["optim.lr=0.01", "seed=1", "trainer.max_steps=7", "trainer.precision=64-true",
     "model.head_k_dim=4", "task.num_kv_pairs=4", "plateau.min_delta=0.02"],
)  # fmt: skip
def test_identity_changes_the_hash(make_cfg, override: str) -> None:
    assert config_hash(make_cfg(["model=deltanet", override])) != config_hash(
        make_cfg(["model=deltanet"])
    )


def test_plumbing_swept_never_splits_the_report_points() -> None:
    rows = [
        {"task": "t", "model": "m", "model.mode": mode, "threads": n, "optim.lr": lr}
        for mode, n, lr in (("chunk", 1, 0.1), ("recurrent", 2, 0.2))
    ]
    assert varied(rows, ["model.mode", "threads", "optim.lr"]) == ["optim.lr"]


def test_the_capacity_protocol_settings_make_another_run_only_while_it_is_on(make_cfg) -> None:
    """Under the protocol, `capacity.max_load` and `capacity.bound_multiple` set the loads a
    run trains and tests on (Mamba-2 at d_state 3: loads to 12 by default, to 16 asked): two
    runs that differ in them are two runs, and a sweep's resume must not take one for the
    other. Off, they derive nothing and leave the hash as it was."""
    plain = config_hash(make_cfg(["model=mamba2"]))
    assert config_hash(make_cfg(["model=mamba2", "capacity.max_load=16"])) == plain
    on = ["model=mamba2", "capacity.protocol=true"]
    assert config_hash(make_cfg(on)) != plain
    hashes = {
        config_hash(make_cfg([*on, *extra]))
        for extra in ([], ["capacity.max_load=16"], ["capacity.bound_multiple=3"])
    }
    assert len(hashes) == 3
