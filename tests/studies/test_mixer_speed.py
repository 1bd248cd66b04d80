"""studies.mixer_speed: the zero-cost stand-in for a recurrence (`--floor`)."""

import importlib
from unittest import mock

import torch

from studies.mixer_speed import STAND_INS, make_cell, stand_in


def test_stand_in_is_the_values_and_reaches_every_input() -> None:
    q, k, v, beta, log_gate = (torch.randn(2, 2, 5, 3, requires_grad=True) for _ in range(5))
    o = stand_in(q, k, v, beta, log_gate, mode="chunk", chunk_size=16)
    assert torch.equal(o, v)
    grads = torch.autograd.grad(o.sum(), [q, k, v, beta, log_gate])
    assert all(grad is not None for grad in grads)


def test_stand_ins_name_the_recurrences_the_mixers_call() -> None:
    """Each cell with `floor` steps with its mixer's recurrence replaced, and only then."""
    for name, target in STAND_INS.items():
        module, attribute = target.rsplit(".", 1)
        recurrence = getattr(importlib.import_module(module), attribute)
        cell = make_cell(name, 8, 1, floor=True)
        with mock.patch("studies.mixer_speed.stand_in", wraps=stand_in) as spy:
            cell.step()
        assert spy.call_count == 2  # one per layer of the default backbone
        assert getattr(importlib.import_module(module), attribute) is recurrence


def test_a_layer_cell_steps_the_mixer_alone_and_its_modes_agree() -> None:
    """`--layer`: the mixer as the model builds it, on random inputs; its chunk form and step
    loop compute one function, so one step gives both the same gradients."""
    chunk = make_cell("kda", 20, 2, layer=True)
    loop = make_cell("kda", 20, 2, mode="recurrent", layer=True)
    assert chunk.labels is None and chunk.tokens.shape == (2, 20, 64)
    chunk.times = [0.5]
    assert chunk.tokens_per_s() == 80  # 2 x 20 tokens, not the inputs' 2 x 20 x 64 numbers
    chunk.step()
    loop.step()
    pairs = zip(chunk.model.parameters(), loop.model.parameters(), strict=True)
    grads = [(a.grad, b.grad) for a, b in pairs]
    assert all(a is not None for a, _ in grads)
    assert all(torch.allclose(a, b, rtol=1e-3, atol=1e-4) for a, b in grads)
