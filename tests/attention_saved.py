"""The arguments of `attention_bwd.backward` as the autograd forward would leave them: the quantized
operands, row statistics, dO and delta, built from bf16 Q, K, V and dO (kernel-level backward tests); and the same
inputs of `reference.backward_math`, from the reference's own forward."""
from flamia_kernels import attention_fwd, reference
from flamia_kernels import formats as F
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


def reference_backward_inputs(spec, q, k, v, do, sm_scale, causal=True, doc_ids=None, block=128):
    """(ops, do8, delta, M, 1/l) for `reference.backward_math` from bf16 Q, K, V and dO: `formats`' operands (the
    token-block copies attached unless documents mask), the reference's forward, dO quantized per spec.do, delta from
    the quantized O, and M, 1/l through the saved statistics' round trip the kernels see."""
    ops = prepare_forward(q, k, v, spec, True, F, block, off_diagonal=doc_ids is None)
    o, m, l = reference.forward_math(ops, spec, causal, True, sm_scale, doc_ids=doc_ids)
    do8 = quantize_operand(do, spec.do, F)
    delta = reference.backward_delta(do8, reference._quantize_output(o.to(q.dtype), spec.do, F))
    m, linv = reference.unpack_stats(*reference.pack_stats(m, l))
    return ops, do8, delta, m, linv


def ws_ds_out_launch(**options) -> dict:
    """The fp8 fast path's backward launch on the warp-specialized Gluon dK/dV kernel with a dS buffer (ds_out), at the
    interpreter's warps, plus `options`: for host-side tests whose sm_90 kernels are stand-ins."""
    from flamia_kernels import attention_bwd

    return {"num_warps": 4, "num_stages": 1, "pre": True, "gluon": True, "ws_dkdv": True, "bn": 64, "sub": 32,
            "dq": "kernel", "ds_out": attention_bwd.DS_OUT_BUDGET, **options}
