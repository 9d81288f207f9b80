"""The arguments of `attention_bwd.backward` as the autograd forward would leave them: the quantized
operands, row statistics, dO and delta, built from bf16 Q, K, V and dO (kernel-level backward tests)."""
from flamia_kernels import attention_fwd
from flamia_kernels import quantize as QZ
from flamia_kernels.attention_operands import Operand, backward_delta, prepare_forward, quantize_operand


def backward_args(spec, q, k, v, do, causal=True, safeguards=True, sm_scale=0.125, block=128):
    """(q, k, v, do, lse2, moff, delta, spec, causal, safeguards, sm_scale, block) for backward()."""
    ops = prepare_forward(q.detach(), k.detach(), v.detach(), spec, safeguards, QZ, block, v_transposed=True)
    _, lse2, moff, o8, o_scale = attention_fwd.forward(ops.q, ops.k, ops.v, spec, causal, safeguards, sm_scale,
                                                       block, True)
    do_op = quantize_operand(do, spec.do, QZ)
    delta = backward_delta(do_op, Operand(o8, o_scale))
    return ops.q, ops.k, ops.v, do_op, lse2, moff, delta, spec, causal, safeguards, sm_scale, block
