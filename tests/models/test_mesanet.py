"""MesaNet (`mesanet`) and its kernel (`models.kernels.mesa`): the chunk and parallel forms
against a step loop written here from the equations (float64, odd lengths, forward and
backward, a sequence split and its state passed on); fla's conjugate gradient against the exact
solve; the optimal linear read-out (exact at lamb -> 0 on independent keys, better than the
plain sum on correlated ones); the layer against fla's `MesaNet` written out step by step; the
parameterisation, the state size and the rank bound. The generic contract (causality, modes,
step, state size, precision, compile) is in test_mixers.py and its neighbours."""

import pytest
import torch
import torch.nn.functional as F

from models.kernels import MODES
from models.kernels.mesa import mesa_attention

pytestmark = pytest.mark.usefixtures("float64_by_default")

D_MODEL = 16


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def mesa_steps(q, k, v, beta, log_gate, lamb, state=None):
    """H_kk <- a H_kk + b k k^T, H_kv <- a H_kv + b k v^T, o = H_kv^T (H_kk + diag(lamb))^-1 q,
    one head and one token at a time, with the inverse written out."""
    B, H, T, D = q.shape
    outs, kks, kvs = [], [], []
    for b in range(B):
        for h in range(H):
            Hkk = torch.zeros(D, D) if state is None else state[0][b, h]
            Hkv = torch.zeros(D, v.shape[-1]) if state is None else state[1][b, h]
            for t in range(T):
                a, w, kt = log_gate[b, h, t].exp(), beta[b, h, t], k[b, h, t]
                Hkk = a * Hkk + w * torch.outer(kt, kt)
                Hkv = a * Hkv + w * torch.outer(kt, v[b, h, t])
                outs.append(Hkv.T @ torch.linalg.inv(Hkk + torch.diag(lamb[h])) @ q[b, h, t])
            kks.append(Hkk)
            kvs.append(Hkv)
    D_v = v.shape[-1]
    return torch.stack(outs).view(B, H, T, D_v), (
        torch.stack(kks).view(B, H, D, D),
        torch.stack(kvs).view(B, H, D, D_v),
    )


def mesa_inputs(T: int, seed: int = 0, D: int = 5, Dv: int = 4, gate_scale: float = 1.0):
    g = gen(seed)
    q = F.normalize(torch.randn(2, 3, T, D, generator=g), dim=-1)
    k = F.normalize(torch.randn(2, 3, T, D, generator=g), dim=-1)
    v = torch.randn(2, 3, T, Dv, generator=g)
    beta = torch.rand(2, 3, T, generator=g)
    log_gate = -gate_scale * torch.rand(2, 3, T, generator=g)
    lamb = 0.25 + torch.rand(3, D, generator=g)
    return q, k, v, beta, log_gate, lamb


def start_state(seed: int, D: int = 5, Dv: int = 4):
    g = gen(seed)
    root = torch.randn(2, 3, D, D, generator=g)
    return root @ root.mT, torch.randn(2, 3, D, Dv, generator=g)


@pytest.mark.parametrize("T", [1, 13, 37])
@pytest.mark.parametrize(
    ("mode", "chunk_size"),
    [("recurrent", 8), ("chunk", 8), ("chunk", 20), ("chunk", 64), ("parallel", 8)],
)
def test_mesa_attention_is_the_recurrence_forward_and_backward(
    T: int, mode: str, chunk_size: int
) -> None:
    leaves = [x.requires_grad_() for x in mesa_inputs(T)]
    S0 = [x.requires_grad_() for x in start_state(9)]
    expected, S_expected = mesa_steps(*leaves, S0)
    o, S = mesa_attention(
        *leaves, mode=mode, chunk_size=chunk_size, initial_state=tuple(S0), return_state=True
    )
    torch.testing.assert_close(o, expected, rtol=1e-10, atol=1e-10)
    for s, s_expected in zip(S, S_expected, strict=True):
        torch.testing.assert_close(s, s_expected, rtol=1e-10, atol=1e-10)

    def loss(o, S):
        return o.sin().sum() + S[0].square().sum() + S[1].square().sum()

    grads = torch.autograd.grad(loss(o, S), [*leaves, *S0])
    grads_expected = torch.autograd.grad(loss(expected, S_expected), [*leaves, *S0])
    for grad, grad_expected in zip(grads, grads_expected, strict=True):
        torch.testing.assert_close(grad, grad_expected, rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize("mode", MODES)
def test_mesa_attention_split_and_continued_is_the_whole_sequence(mode: str) -> None:
    inputs = mesa_inputs(41, seed=3)
    lamb, seqs = inputs[-1], inputs[:-1]
    whole, S_whole = mesa_attention(*inputs, mode=mode, chunk_size=8, return_state=True)
    cut = 19
    first, S = mesa_attention(
        *(x[:, :, :cut] for x in seqs), lamb, mode=mode, chunk_size=8, return_state=True
    )
    second, S_end = mesa_attention(
        *(x[:, :, cut:] for x in seqs),
        lamb,
        mode=mode,
        chunk_size=8,
        initial_state=S,
        return_state=True,
    )
    torch.testing.assert_close(torch.cat([first, second], 2), whole, rtol=1e-10, atol=1e-10)
    for s, s_whole in zip(S_end, S_whole, strict=True):
        torch.testing.assert_close(s, s_whole, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("mode", ["chunk", "parallel"])
def test_mesa_attention_survives_gates_that_clear_the_state(mode: str) -> None:
    """Log-gates down to -60 per step: products over a block far below float64's smallest
    number; every exponent is a difference <= 0, so nothing overflows."""
    inputs = mesa_inputs(45, seed=5, gate_scale=60.0)
    expected, _ = mesa_steps(*inputs)
    o = mesa_attention(*inputs, mode=mode, chunk_size=32)
    assert torch.isfinite(o).all()
    torch.testing.assert_close(o, expected, rtol=1e-10, atol=1e-10)


def test_mesa_attention_refuses_a_lambda_that_is_not_positive() -> None:
    q, k, v, beta, log_gate, lamb = mesa_inputs(5)
    with pytest.raises(ValueError, match="lamb must be > 0"):
        mesa_attention(q, k, v, beta, log_gate, lamb - 2.0)
    with pytest.raises(ValueError, match="lamb must have shape"):
        mesa_attention(q, k, v, beta, log_gate, lamb[:, :2])
