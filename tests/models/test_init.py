"""The model's `init` option: `torch` (PyTorch's defaults, the default) leaves the model as it
was built before the option existed; `fla` draws every Linear, Conv1d and Embedding weight from
N(0, 0.02^2) with zero biases, as fla's models do, and leaves RWKV-7's modules to their own
initialisation as fla does."""

import pytest
import torch
from torch import nn

from models.backbone import FLA_INIT_STD, LanguageModel

VOCAB, T = 64, 32


def model(mixer: str, params: dict | None = None, seed: int = 0, **kw) -> LanguageModel:
    torch.manual_seed(seed)
    return LanguageModel(VOCAB, T, mixer, params, d_model=64, **kw)


def weighted(m: nn.Module, skip: tuple[str, ...] = ()) -> list[tuple[str, nn.Module]]:
    return [
        (name, mod)
        for name, mod in m.named_modules()
        if isinstance(mod, (nn.Linear, nn.Conv1d, nn.Embedding))
        and not any(name.startswith(prefix) for prefix in skip)
    ]


@pytest.mark.parametrize(
    "mixer", ["deltanet", "gated_deltanet", "mamba2", "gla", "kda", "softmax", "log_linear_mamba2"]
)
def test_fla_init_draws_weights_from_n_0_002_and_zeroes_biases(mixer: str) -> None:
    """All weights pooled: std within 5% of 0.02 and mean near 0 (thousands of draws); each
    matrix of >= 256 entries within 25% of 0.02; every bias exactly zero."""
    m = model(mixer, init="fla")
    pooled = []
    for name, mod in weighted(m):
        w = mod.weight.detach().flatten()
        pooled.append(w)
        if w.numel() >= 256:
            assert abs(w.std().item() / FLA_INIT_STD - 1) < 0.25, name
        bias = getattr(mod, "bias", None)
        if bias is not None:
            assert torch.equal(bias, torch.zeros_like(bias)), name
    w = torch.cat(pooled)
    assert w.numel() > 10_000
    assert abs(w.std().item() / FLA_INIT_STD - 1) < 0.05
    assert abs(w.mean().item()) < 4 * FLA_INIT_STD / w.numel() ** 0.5


def test_fla_init_reaches_the_block_conv_mlp_embeddings_and_head() -> None:
    m = model("softmax", init="fla", short_conv=4, mlp_ratio=4)
    names = {name for name, _ in weighted(m)}
    assert {"embed", "positions", "head", "blocks.0.conv.conv", "blocks.1.mlp.0"} <= names
    for name in ("embed", "positions", "head"):
        assert abs(getattr(m, name).weight.std().item() / FLA_INIT_STD - 1) < 0.1, name


def test_fla_init_leaves_rwkv7_to_its_own_initialisation() -> None:
    """fla's RWKV-7 model skips its attention's modules (`_in_rwkv_module`): the mixer's
    weights are the ones `init=torch` builds; the backbone around it is redrawn."""
    torch_init, fla = model("rwkv7"), model("rwkv7", init="fla")
    for (name, a), (_, b) in zip(
        torch_init.blocks[0].mixer.state_dict().items(),
        fla.blocks[0].mixer.state_dict().items(),
        strict=True,
    ):
        assert torch.equal(a, b), name
    assert abs(fla.embed.weight.std().item() / FLA_INIT_STD - 1) < 0.1
    assert not torch.equal(fla.head.weight, torch_init.head.weight)


@pytest.mark.parametrize("mixer", ["deltanet", "mamba2", "rwkv7", "kda"])
def test_torch_init_is_the_model_built_without_the_option(mixer: str) -> None:
    """Bit-identical parameters and buffers for a fixed seed, and the same RNG state after."""
    default = model(mixer)
    after_default = torch.random.get_rng_state()
    explicit = model(mixer, init="torch")
    assert torch.equal(torch.random.get_rng_state(), after_default)
    a, b = default.state_dict(), explicit.state_dict()
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), key


@pytest.mark.parametrize("value", ["xavier", "FLA", None, 0])
def test_an_unknown_init_is_refused_naming_it_and_the_choices(value) -> None:
    with pytest.raises(ValueError, match=r"init=.*torch, fla") as error:
        model("softmax", init=value)
    assert repr(value) in str(error.value) or str(value) in str(error.value)


def test_init_torch_leaves_the_config_hash_as_before_the_key_existed(make_cfg) -> None:
    """Runs recorded before `backbone.init` existed keep their hash; `fla` is a new run."""
    from omegaconf import open_dict

    from harness.config.hashing import config_hash

    cfg = make_cfg(["logger=none"])
    with open_dict(cfg):
        cfg.backbone.pop("init", None)
        before = config_hash(cfg)
        cfg.backbone.init = "torch"
        assert config_hash(cfg) == before
        cfg.backbone.init = "fla"
        assert config_hash(cfg) != before
