"""Conjugate gradient as fla's MesaNet runs it (`fla/ops/mesa_net/naive.py`): a fixed number of
steps with guarded divisions, the approximation to the Mesa read-out's exact solve
(`models.kernels.mesa`; docs/background.md, "MesaNet")."""

import torch
from torch import Tensor


def conjugate_gradient(
    A: Tensor, b: Tensor, steps: int, x0: Tensor | None = None, eps: float = 1e-5
) -> Tensor:
    """x with A x ~ b for symmetric positive definite A, by `steps` conjugate-gradient steps
    from x0 (zeros if None), each division guarded by `eps` as fla's kernels do:

        r = b - A x,  p = r,  d = r . r
        repeat: alpha = d / (p . A p + eps);  x += alpha p;  r -= alpha A p
                d' = r . r;  p = r + d' / (d + eps) p;  d = d'

    In exact arithmetic and without the guards, D steps reach the exact solution (D the size
    of A); the guards stall the iteration once r . r falls towards eps, so x keeps a residual
    of that order (docs/background.md, "MesaNet", measures it). fla's chunk kernel starts from
    x0 = 0, its one-token decoding from x0 = b / (diag(A)).

    Shapes: A [..., D, D], b and x0 [..., D] -> x [..., D]."""
    x = torch.zeros_like(b) if x0 is None else x0
    r = b - (A @ x.unsqueeze(-1)).squeeze(-1)
    p, d = r, (r * r).sum(-1)
    for _ in range(steps):
        Ap = (A @ p.unsqueeze(-1)).squeeze(-1)
        alpha = d / ((p * Ap).sum(-1) + eps)
        x = x + alpha[..., None] * p
        r = r - alpha[..., None] * Ap
        d_new = (r * r).sum(-1)
        p = r + (d_new / (d + eps))[..., None] * p
        d = d_new
    return x
