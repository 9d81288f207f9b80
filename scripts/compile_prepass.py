"""Compile every Triton pre-pass kernel of `kernels/quantize.py` (and the backward's key copies) for sm_90 on a
machine without a GPU.

    python scripts/compile_prepass.py            # prints one line per kernel variant, exit 1 on a failure

Why: under TRITON_INTERPRET=1 (the CPU tests) the kernels' GPU-only branches (`_HW_FP8`,
`_FUSED_FMA`) are Python code that never meets Triton's compiler, so a construct the compiler
rejects (a run-time tensor in a constexpr `and`, say) passes every CPU test and fails on the GPU.
This compiles each kernel at each of its constexpr combinations the launchers use, for sm_90 with
the JIT's argument specialization, as scripts/kernel_registers.py does for the attention kernels.
"""
from __future__ import annotations

import itertools
import sys

from kernel_registers import import_for_gpu  # scripts/ is this script's first sys.path entry


def _quantize_module():
    """flamia_kernels.quantize built for the GPU (kernel_registers.import_for_gpu)."""
    import_for_gpu()
    from flamia_kernels import quantize

    return quantize


def variants(qz):
    """(label, jit function, signature, constexprs, num_warps) of each launch the pre-pass makes."""
    tiny = 2.0 ** -126
    fp8 = dict(TINY=tiny, BLOCK_D=128)
    for per_block, write_t in itertools.product((False, True), repeat=2):
        yield (f"tokens per_block={per_block} write_t={write_t}", qz._fp8_tokens_kernel,
               {"X": "*bf16", "X8": "*u8", "X8T": "*u8", "Scale": "*fp32", "S": "i32"},
               {**fp8, "D": 128, "BLOCK_S": 128 if per_block else 32, "PER_BLOCK": per_block, "WRITE_T": write_t}, 4)
    for transposed in (False, True):
        yield (f"key side transposed={transposed}", qz._fp8_key_side_kernel,
               {"X": "*bf16", "X8": "*u8", "Scale": "*fp32", "XB8": "*u8", "BScale": "*fp32", "S": "i32"},
               {**fp8, "D": 128, "BLOCK_S": 128, "TRANSPOSED": transposed}, 16)
        yield (f"requant blocks transposed={transposed}", qz._fp8_requant_blocks_kernel,
               {"X8": "*u8", "Scale": "*fp32", "Y8": "*u8", "BScale": "*fp32", "S": "i32"},
               {**fp8, "D": 128, "BLOCK_S": 128, "TRANSPOSED": transposed}, 8)
    for p_order in (False, True):  # V's token-block copy in key order or in P's register order
        yield (f"key sides, K and Vᵀ in one launch p_order={p_order}", qz._fp8_key_sides_kernel,
               {"K": "*bf16", "K8": "*u8", "KScale": "*fp32", "KB8": "*u8", "KBScale": "*fp32", "V": "*bf16",
                "V8": "*u8", "VScale": "*fp32", "VB8": "*u8", "VBScale": "*fp32", "S": "i32"},
               {**fp8, "D": 128, "BLOCK_S": 128, "P_ORDER": p_order}, 8)
    # the backward's `pre` copies of K and V (attention_bwd_copies); K_REQ / V_REQ re-quantize K's token-block
    # bytes / V's token-block rows
    from flamia_kernels import attention_bwd_copies as copies

    # (K's half, V's half): both in one launch, or each alone at its own warps (KEY_COPIES_SPLIT, the default)
    halves = [((True, True), 8), ((True, False), copies.KEY_COPIES_WARPS["k"]),
              ((False, True), copies.KEY_COPIES_WARPS["v"])]
    for k_req, v_req in itertools.product((False, True), repeat=2):
        for (do_k, do_v), warps in halves:
            yield (f"backward key copies k_req={k_req} v_req={v_req} K={do_k} V={do_v}", copies._key_copies_kernel,
                   {"K": "*fp8e4nv", "KS": "*fp32", "KB": "*u8" if k_req else "*fp8e4nv", "KBS": "*fp32",
                    "VT": "*u8", "VS": "*fp32", "VBT": "*u8", "KBF": "*bf16", "KBBF": "*bf16", "VR": "*u8",
                    "VBR": "*u8", "VBS": "*fp32", "S": "i32"},
                   {"D": 128, "BR": 128, "K_OFF": True, "K_REQ": k_req, "V_OFF": True, "V_REQ": v_req, "TINY": tiny,
                    "DO_K": do_k, "DO_V": do_v}, warps)
    for k_req in (False, True):  # K's bytes K-major for an FP8 dQ product (ds_out with fp8_dq), not its bf16 copies
        yield (f"backward key copies k_req={k_req} K-major", copies._key_copies_kernel,
               {"K": "*fp8e4nv", "KS": "*fp32", "KB": "*u8" if k_req else "*fp8e4nv", "KBS": "*fp32",
                "VT": "*u8", "VS": "*fp32", "VBT": "*u8", "KBF": "*u8", "KBBF": "*u8", "VR": "*u8",
                "VBR": "*u8", "VBS": "*fp32", "S": "i32"},
               {"D": 128, "BR": 128, "K_OFF": True, "K_REQ": k_req, "V_OFF": True, "V_REQ": False, "TINY": tiny,
                "DO_K": True, "DO_V": False, "K_T": True}, copies.KEY_COPIES_WARPS["k_t"])
    from flamia_kernels import dq_row_scale

    # ρ of an FP8 dQ product (ds_out with fp8_dq): dO's bytes (or their rows' L1 from the dO pass), the statistics,
    # K's and V's scales
    for has_l1 in (False, True):
        yield (f"dQ row scale has_l1={has_l1}", dq_row_scale._dq_row_scale_kernel,
               {"DO8": "*u8", "L1": "*fp32", "STATS": "*fp32", "KS": "*fp32", "VS": "*fp32", "KBS": "*fp32",
                "VBS": "*fp32", "RHO": "*fp32", "S": "i32", "G": "i32"},
               {"D": 128, "TB": dq_row_scale.TB, "NT": 64, "ROWS": 8, "IRHO_ROW": 5, "HAS_L1": has_l1}, 4)
    # the dO pass, with dO's bytes also K-major (the FP8 dV product) or not, and their rows' L1 (ρ's) or not
    for write_t, write_l1 in itertools.product((False, True), repeat=2):
        yield (f"tokens with delta write_t={write_t} write_l1={write_l1}", qz._fp8_tokens_delta_kernel,
               {"X": "*bf16", "X8": "*u8", "X8T": "*u8", "Scale": "*fp32", "O8": "*u8", "OScale": "*fp32",
                "Delta": "*fp32", "L1": "*fp32", "S": "i32"},
               {**fp8, "D": 128, "BLOCK_S": 32, "WRITE_T": write_t, "WRITE_L1": write_l1}, 4)
    yield ("mxfp8", qz._mxfp8_kernel, {"X": "*bf16", "X8": "*u8", "Codes": "*u8", "R": "i32", "NB": "i32"},
           {"BLOCK_R": 32, "NB_P2": 4, "BLK": 32}, 4)
    for per_row, stochastic in itertools.product((False, True), repeat=2):
        yield (f"nvfp4 global_per_row={per_row} stochastic={stochastic}", qz._nvfp4_kernel,
               {"X": "*bf16", "Noise": "*fp32", "Glob": "*fp32", "Codes": "*u8", "BScale": "*u8", "R": "i32",
                "NB": "i32"},
               {"TINY": tiny, "BLOCK_R": 32, "NB_P2": 8, "HALF": 8, "GLOBAL_PER_ROW": per_row,
                "STOCHASTIC": stochastic}, 4)


def compile_for_sm90(fn, signature: dict, constexprs: dict, num_warps: int) -> None:
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    sig = {**signature, **{k: "constexpr" for k in constexprs}}
    attrs = {(i,): [["tt.divisibility", 16]] for i, kind in enumerate(sig.values()) if kind.startswith("*")}
    src = ASTSource(fn=fn, signature=sig, constexprs=constexprs, attrs=attrs)
    triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": num_warps})


def main() -> int:
    qz = _quantize_module()
    failed = 0
    for label, fn, signature, constexprs, warps in variants(qz):
        try:
            compile_for_sm90(fn, signature, constexprs, warps)
            print(f"ok      {label}", flush=True)
        except Exception as err:  # noqa: BLE001 - report every variant, then fail
            failed += 1
            lines = [line.strip() for line in str(err).splitlines() if line.strip().strip("^")]
            print(f"FAILED  {label}: {type(err).__name__}: {' | '.join(lines[:2])}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
