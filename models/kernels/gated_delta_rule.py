"""The gated delta rule (Gated DeltaNet; docs/background.md, section 15): the delta rule whose
state is first scaled by a gate a_t = exp(log_gate_t) in (0, 1], one per head and token. Its
step loop and chunk form are the delta rule's (`models.kernels.delta_rule`) with the gate."""

from functools import partial

from torch import Tensor

from models.kernels.common import check_log_gate, check_mode, check_qkv, check_shape, in_blocks
from models.kernels.delta_rule import delta_chunks, delta_recurrent
from models.precision import in_fp32


@in_fp32()
def gated_delta_rule(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    beta: Tensor,
    log_gate: Tensor,
    *,
    mode: str = "chunk",
    chunk_size: int = 64,
    initial_state: Tensor | None = None,
    return_state: bool = False,
) -> Tensor | tuple[Tensor, Tensor]:
    """The delta rule with a forget gate per head and token:

        S_t = a_t (I - b_t k_t k_t^T) S_{t-1} + b_t k_t v_t^T,   o_t = S_t^T q_t,
        a_t = exp(log_gate_t)

    No scaling inside (the caller scales q and L2-normalises k). With every log-gate 0 this
    is `delta_rule`.

    Args:
        q: queries.
        k: keys (the caller L2-normalises them).
        v: values.
        beta: the write rates b_t, in (0, 1).
        log_gate: log a_t, finite and <= 0, one per head and token.
        mode: "recurrent" (the step loop, the specification), "chunk" (the delta rule's WY
            form with the gate: inside a chunk the products weighted by exp(b_i - b_j), b the
            cumulative log-gate, and the start state read through exp(b_i); see
            docs/background.md, section 15), "parallel" (the chunk form with one chunk
            covering the whole sequence: a T x T triangular solve).
        chunk_size: the chunk length of "chunk".
        initial_state: S to start from (zeros if None).
        return_state: also return the state after the last step.

    Shapes:
        q, k: [B, H, T, D];  v: [B, H, T, Dv];  beta, log_gate: [B, H, T]
        state S: [B, H, D, Dv]

    Returns:
        o [B, H, T, Dv], or (o, S) with `return_state`.
    """
    check_mode(mode, chunk_size)
    check_qkv(q, k, v)
    B, H, T, D = q.shape
    check_shape("beta", beta, (B, H, T))
    check_shape("log_gate", log_gate, (B, H, T))
    check_log_gate("log_gate", log_gate)
    if initial_state is not None:
        check_shape("initial_state", initial_state, (B, H, D, v.shape[-1]))
    if mode == "recurrent":
        o, state = delta_recurrent(q, k, v, beta, log_gate, initial_state)
    else:
        size = T if mode == "parallel" else chunk_size
        chunks = partial(delta_chunks, return_state=return_state)
        o, state = in_blocks(chunks, (q, k, v, beta, log_gate), 2, size, initial_state)
    return (o, state) if return_state else o
