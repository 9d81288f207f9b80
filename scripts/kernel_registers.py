"""Registers and spills of the FLAMIA attention kernels on sm_90, compiled on a machine without a GPU.

    python scripts/kernel_registers.py                         # fwd, dkdv, dq at their default launch
    python scripts/kernel_registers.py --kernels dkdv --configs 8x2x32 8x1x32 8x2x16:atomic
    python scripts/kernel_registers.py --spec nvfp4-fp8 --dim 64 --no-off-diagonal
    python scripts/kernel_registers.py --kernels fwd_gluon --no-grad   # the forward a no_grad call launches

Why: the backward kernels were 2.6x cuDNN's time on the H200, and the device hours are few.
Triton compiles for a named target without a driver (`triton.compile(ASTSource, GPUTarget("cuda",
90, 32))`), and its wheel ships `ptxas`, whose `-v` report gives the registers per thread and the
bytes spilled to local memory: a kernel that spills is slow before any timing says so. Each
config is compiled for the constexprs the real launch would pass (`attention_fwd.launch_config`,
`attention_bwd.launch_config`, the spec's formats); the argument dtypes follow the spec (fp8 bytes
for fp8 operands, bf16 values for emulated ones).

Configs: as scripts/bench_attention.py takes them (scripts/launch_configs.py), e.g. 8x2x32:half
(the backward's sub-tile 32, dK/dV programs of 64 keys) or 8x3:bptr (the forward's off-diagonal
K/V tiles through block pointers). This reports the compiler's view only:
speed is measured on the GPU (scripts/bench_attention.py --profile).
"""

from __future__ import annotations

import argparse
import inspect
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from launch_configs import parse_config  # scripts/ is this script's first sys.path entry

ROOT = Path(__file__).resolve().parents[1]


def import_for_gpu():
    """Make flamia_kernels importable from this checkout (the repo's kernels/ directory is the
    package), built for the GPU: TRITON_INTERPRET is dropped before the first import (a process that
    already imported the kernels under the interpreter cannot compile them; run as its own process)."""
    os.environ.pop("TRITON_INTERPRET", None)
    try:
        import flamia_kernels  # noqa: F401
    except ImportError:
        link = Path(tempfile.mkdtemp()) / "flamia_kernels"
        link.symlink_to(ROOT / "kernels")
        sys.path.insert(0, str(link.parent))


def _import_kernels():
    """The attention kernels' modules and constants this script compiles with (`import_for_gpu`)."""
    import_for_gpu()
    from flamia_kernels import attention_bwd, attention_fwd
    from flamia_kernels.attention_quant import fmt_code
    from flamia_kernels.formats import FP8_TINY
    from flamia_kernels.spec import SEQ_BLOCK, AttentionSpec

    return attention_fwd, attention_bwd, fmt_code, FP8_TINY, SEQ_BLOCK, AttentionSpec


def _signature(fn, constexprs: dict, pointer_types: dict) -> dict:
    """Triton signature of a jit function: constexprs by name, pointers by name, scalars by kind."""
    scalars = {"S": "i32", "G": "i32", "HKV": "i32", "qk_scale": "fp32", "sm_scale": "fp32", "P_GLOB": "fp32"}
    sig = {}
    for name in inspect.signature(fn).parameters:
        if name in constexprs:
            sig[name] = "constexpr"
        elif name in scalars:
            sig[name] = scalars[name]
        else:
            sig[name] = pointer_types.get(name, "*fp32")
    return sig


def _nvidia_bin() -> Path:
    """The CUDA tools Triton's wheel ships (ptxas, cuobjdump)."""
    import triton

    return Path(triton.__file__).parent / "backends" / "nvidia" / "bin"


def ptxas_report(ptx: str, arch: str = "sm_90a") -> dict:
    """{"registers", "spill_stores", "spill_loads", "serialized"} from the bundled ptxas's -v output
    (Triton ships a second ptxas for Blackwell targets)."""
    bin_dir = _nvidia_bin()
    ptxas = bin_dir / ("ptxas-blackwell" if arch.startswith("sm_10") and (bin_dir / "ptxas-blackwell").exists()
                       else "ptxas")
    with tempfile.NamedTemporaryFile("w", suffix=".ptx", delete=False) as f:
        f.write(ptx)
    try:
        out = subprocess.run([str(ptxas), f"-arch={arch}", "-v", f.name, "-o", os.devnull],
                             capture_output=True, text=True, check=True)
    finally:
        os.unlink(f.name)
    text = out.stdout + out.stderr
    regs = re.search(r"Used (\d+) registers", text)
    spill = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", text)
    if not regs or not spill:
        raise RuntimeError(f"ptxas -v printed no register report:\n{text}")
    # C751x (seen: C7511, C7512 "insufficient register resources", C7514, C7515): ptxas serialized the wgmma
    # instructions (too few registers for the products in flight; an accumulator in flight touched by other
    # instructions), which undoes a kernel's overlap of its products: every wgmma is then waited for as issued
    # (WARPGROUP.DEPBAR after each in the SASS)
    return {"registers": int(regs.group(1)), "spill_stores": int(spill.group(1)),
            "spill_loads": int(spill.group(2)), "serialized": bool(re.search(r"C751\d", text))}


def loop_spills(ptx: str, arch: str = "sm_90a") -> int:
    """Spill instructions (LDL / STL) inside the kernel's innermost loops that issue wgmma (HGMMA in the SASS): the
    loops whose pace the kernel runs at. A spill outside them (loop invariants kept across a loop, reloaded after it)
    costs once a program or a head; inside, every sub-tile. A loop: a span closed by a predicated backward branch
    (ptxas places the mbarrier waits' retry paths after the code, each returning by an unconditional branch)."""
    bin_dir = _nvidia_bin()
    with tempfile.TemporaryDirectory() as tmp:
        src, cubin = Path(tmp) / "k.ptx", Path(tmp) / "k.cubin"
        src.write_text(ptx)
        subprocess.run([str(bin_dir / "ptxas"), f"-arch={arch}", str(src), "-o", str(cubin)], check=True,
                       capture_output=True)
        sass = subprocess.run([str(bin_dir / "cuobjdump"), "-sass", str(cubin)], check=True, capture_output=True,
                              text=True).stdout
    ins = [(int(m.group(1), 16), m.group(2)) for m in re.finditer(r"/\*([0-9a-f]{4,})\*/\s+([^;]*);", sass)]
    loops = []  # (first, last) address of each span a backward branch closes that issues wgmma
    for addr, op in ins:
        jump = re.match(r"@!?U?P\w+\s+BRA\s+0x([0-9a-f]+)", op.strip())
        if jump and int(jump.group(1), 16) < addr:
            first = int(jump.group(1), 16)
            if any(first <= a <= addr and "HGMMA" in o for a, o in ins):
                loops.append((first, addr))
    innermost = [(f, l) for f, l in loops if not any(f <= f2 and l2 <= l and (f2, l2) != (f, l) for f2, l2 in loops)]
    return sum(1 for a, o in ins if re.search(r"\b(LDL|STL)\b", o) and any(f <= a <= l for f, l in innermost))


def mma_kinds(ptx: str) -> list[str]:
    """The distinct tensor-core instructions in a PTX listing (wgmma / tcgen05 / mma, shape and types),
    e.g. to see that a product runs in FP8 or block-scaled."""
    found = re.findall(r"\b((?:wgmma\.mma_async|tcgen05\.mma|mma\.sync)[\w.:]*)", ptx)
    return sorted(set(found))


def compile_report(kernel: str, cfg: dict, spec_name: str, dim: int, causal: bool, off_diagonal: bool,
                   safeguards: bool, capability: int = 90, qk_mx: bool = False) -> dict:
    """Compile one kernel at one launch config for sm_<capability> and return ptxas's report and the
    tensor-core instructions used. qk_mx (forward, spec qk=mxfp8): the block-scaled QKᵀ path."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    fwd, bwd, fmt_code, tiny, block, AttentionSpec = _import_kernels()
    spec = AttentionSpec.parse(spec_name)
    val = lambda fmt: "*fp8e4nv" if fmt == "fp8" else "*bf16"  # noqa: E731  stored operand dtype
    pointers = {"Q": val(spec.qk), "K": val(spec.qk), "KB": val(spec.qk), "VT": val(spec.pv),
                "VBT": val(spec.pv), "DO": val(spec.do), "O": "*bf16", "O8": "*u8", "DK": "*bf16",
                "DV": "*bf16", "DQ": "*bf16", "DOC": "*i32", "DSTART": "*i32", "DEND": "*i32",
                # the backward's `pre` copies (attention_bwd._bf16_copies)
                "QB": "*bf16", "DOT": val(spec.do), "KBF": "*bf16", "KBBF": "*bf16", "VR": val(spec.pv),
                "VBR": val(spec.pv)}
    # fp8 K and V carry their off-diagonal token-block copies (attention_operands._key_side)
    common = dict(D=dim, CAUSAL=causal, TINY=tiny, INTERP=False, HAS_DOC=False,
                  K_OFF=off_diagonal and spec.qk == "fp8", V_OFF=off_diagonal and spec.pv == "fp8")
    # the default row ({}) compiles what launch_config gives; a config spelt out (8x2x32...) is the
    # full-tile program unless it says :half / :bm64
    is_default = not cfg
    cfg = dict(cfg)
    if kernel == "fwd":
        fn = fwd._fwd_kernel
        defaults = fwd.launch_config(dim, spec.emulated)
        if qk_mx and spec.qk != "mxfp8":
            raise ValueError(f"--qk-mx needs an mxfp8 qk operand, spec {spec_name!r} has qk={spec.qk}")
        if qk_mx:
            pointers.update(Q="*fp8e4nv", K="*fp8e4nv", QE="*u8", KE="*u8")
        fuse_q = cfg.pop("fuse_q", False)
        if fuse_q:  # Q in bf16, its bytes out through Q8
            pointers.update(Q="*bf16", Q8="*u8")
        consts = dict(common, BLOCK=block, PV_FMT=fmt_code(spec.pv), SAFE=safeguards, SAVE_O8=spec.do != "bf16",
                      BPTR=cfg.pop("BPTR", False), QK_MX=qk_mx,
                      BM=cfg.pop("bm", defaults.get("bm", block) if is_default else block), FUSE_Q=fuse_q)
    else:
        defaults = bwd.launch_config(dim, spec.ds, spec.emulated)
        if kernel == "dq" and is_default:  # the dQ kernel's own launch where the defaults give one
            defaults = {**defaults, "num_warps": defaults.get("dq_warps", defaults["num_warps"]),
                        "num_stages": defaults.get("dq_stages", defaults["num_stages"]),
                        "sub": defaults.get("dq_sub", defaults.get("sub"))}
        sub, fuse = cfg.pop("sub", defaults.get("sub")), cfg.pop("dq", "kernel") == "atomic"
        bn = cfg.pop("bn", defaults.get("bn", block) if is_default else block)
        consts = dict(common, DS_FMT=fmt_code(spec.ds), PRE=cfg.pop("pre", defaults.get("pre", False) if is_default
                                                                  else False), DP_EARLY=cfg.pop("dp_early", True))
        if kernel == "dkdv":
            fn = bwd._dkdv_kernel
            consts.update(BN=bn, BM=sub, PV_FMT=fmt_code(spec.pv), SAFE=safeguards, FUSE_DQ=fuse, TB=block,
                          R_PRE=bn != block, FP8_DV=spec.fp8_dv)
        else:
            fn = bwd._dq_kernel
            consts.update(BM=cfg.pop("bm", defaults.get("bm", block) if is_default else block), BN=sub, TB=block,
                          FP8_DQ=cfg.pop("fp8_dq", False))
    options = {k: cfg.get(k, defaults[k]) for k in ("num_warps", "num_stages")}
    sig = _signature(fn.fn, consts, pointers)
    # the JIT specializes 16-byte-aligned pointers and integers divisible by 16 (every launch here): without
    # these hints addresses are computed per element and loads are not vectorized
    attrs = {(i,): [["tt.divisibility", 16]] for i, (name, kind) in enumerate(sig.items())
             if kind.startswith("*") or kind == "i32"}
    src = ASTSource(fn=fn, signature=sig, constexprs=consts, attrs=attrs)
    compiled = triton.compile(src, target=GPUTarget("cuda", capability, 32), options=options)
    label = (f"{options['num_warps']}x{options['num_stages']}" + (":bptr" if consts.get("BPTR") else "")
             + (":bm64" if kernel == "fwd" and consts["BM"] != block else "")
             + (":fuseq" if consts.get("FUSE_Q") else ""))
    if kernel != "fwd":
        label += (f"x{sub}" + (":atomic" if fuse else "") + (":half" if kernel == "dkdv" and bn != block else "")
                  + (":bm64" if kernel == "dq" and consts["BM"] != block else "") + (":pre" if consts["PRE"] else "")
                  + ("" if consts["DP_EARLY"] else ":late") + (":fp8dq" if consts.get("FP8_DQ") else ""))
    ptx = compiled.asm["ptx"]
    return {"config": label, **ptxas_report(ptx, f"sm_{capability}a"), "mma": mma_kinds(ptx)}


def _compile_gluon(kernel, descs, kinds: list, consts: dict, options: dict) -> str:
    """PTX of a Gluon kernel compiled for sm_90 (`compile_gluon`)."""
    return compile_gluon(kernel, descs, kinds, consts, options).asm["ptx"]


def compile_gluon(kernel, descs, kinds: list, consts: dict, options: dict):
    """A Gluon kernel compiled for sm_90 (Triton's compiled kernel: .asm, .metadata): its TMA descriptors (built
    on empty CPU tensors) typed by `mangle_type`, the other arguments by `kinds`, with the JIT's divisibility
    hints."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource
    from triton.runtime.jit import mangle_type

    names = list(inspect.signature(kernel.fn).parameters)
    kinds = [mangle_type(x) for x in descs] + kinds
    sig = {**dict(zip(names[:len(kinds)], kinds, strict=True)), **{k: "constexpr" for k in consts}}
    attrs = {(i,): [["tt.divisibility", 16]] for i, n in enumerate(names) if sig[n].startswith("*") or n == "S"}
    return triton.compile(GluonASTSource(kernel, sig, constexprs=consts, attrs=attrs),
                          target=GPUTarget("cuda", 90, 32), options=options)


def gluon_forward_report(cfg: dict, safeguards: bool, no_grad: bool = False) -> dict:
    """compile_report for the sm_90 Gluon forward (`attention_fwd_gluon`; fp8, D = 128 only). no_grad: the kernel a
    forward nothing differentiates launches (no O8 copy, no Q bytes written), a compile of its own: ptxas decides
    per compile whether it serializes the wgmma."""
    import torch

    _import_kernels()
    from flamia_kernels import attention_fwd_gluon as G
    from flamia_kernels import attention_fwd_ws as W

    pipe = cfg.get("pipe", G.PIPE)
    stages = cfg.get("gluon_stages") or G.default_stages(pipe)
    f8, seq, d = torch.float8_e4m3fn, 4 * G.BLOCK, G.BLOCK
    tensor = lambda *shape: torch.empty(*shape, dtype=f8)  # noqa: E731
    ops = [argparse.Namespace(vals=tensor(1, 1, seq, d)) for _ in range(2)]
    ops[1].off = argparse.Namespace(vals=tensor(1, 1, seq, d))
    v = argparse.Namespace(vals_t=tensor(1, 1, d, seq), off=argparse.Namespace(vals=tensor(1, 1, d, seq)))
    fuse_q = cfg.get("fuse_q", True) and safeguards  # the fast path's default: Q quantized in the kernel
    p_order = cfg.get("p_order", G.P_ORDER)
    consts = G.constexprs(safeguards, save_o8=not no_grad, fuse_q=fuse_q, pipe=pipe, stages=stages, p_order=p_order,
                          refill_under_qk=cfg.get("refill_qk"), head_chunk=cfg.get("head_chunk"), pdl=cfg.get("pdl"),
                          save_q=not no_grad, half_diag=cfg.get("half_diag"))
    outs = G.out_descriptors(torch.empty(1, 1, seq, d, dtype=torch.bfloat16), tensor(1, 1, seq, d), ops[0].vals)
    kinds = (["*bf16" if fuse_q else "*fp8e4nv"] + ["*fp32"] * 5
             + ["*bf16", "*u8", "*fp32", "*fp32", "*i8", "fp32", "i32", "i32"])
    if pipe == W.PIPE:  # the warp-specialized kernel: one program of 128 rows per SM, its own constants
        stages = cfg.get("gluon_stages") or W.STAGES
        pingpong = cfg.get("pingpong", W.PINGPONG)
        ws_kinds = kinds[:6] + kinds[8:]  # no O / O8 pointers: it writes them by TMA only
        ptx = _compile_gluon(W._fwd_ws_kernel, G.descriptors(ops[0], ops[1], v) + outs, ws_kinds,
                             W.constexprs(safeguards, not no_grad, fuse_q, stages, pingpong, p_order),
                             {"num_warps": 4, "maxnreg": W.MAXNREG})
        label = (f"4x{stages}:gluon:ws" + (":pp" if pingpong else "") + ("" if fuse_q else ":qpass")
                 + (" no_grad" if no_grad else ""))
        return {"config": label, **ptxas_report(ptx), "mma": mma_kinds(ptx)}
    ptx = _compile_gluon(G._fwd_gluon_kernel, G.descriptors(ops[0], ops[1], v) + outs, kinds, consts,
                         {"num_warps": G.BM // 16, **G._registers(pipe)})
    label = (f"{G.BM // 16}x{stages}:gluon" + (":chain" if pipe == 3 else f":pipe{pipe}")
             + ("" if fuse_q else ":qpass")  # V's copy's order where it is not the default's, as the flags name it
             + ("" if p_order == G.P_ORDER else ":porder" if p_order else ":keyorder")
             + (":refillqk" if consts["REFILL_UNDER_QK"] else "")
             + (f":chunk{consts['HEAD_CHUNK']}" if consts["HEAD_CHUNK"] != G.HEAD_CHUNK else "")
             + ("" if consts["PDL"] == G.PDL else ":pdl" if consts["PDL"] else ":nopdl")
             + ("" if consts["HALF_DIAG"] == G.half_diag_applies(None, pipe) else
                ":halfdiag" if consts["HALF_DIAG"] else ":fulldiag")
             + (" no_grad" if no_grad else ""))
    return {"config": label, **ptxas_report(ptx), "mma": mma_kinds(ptx)}


def _gluon_backward_operands(G):
    """Stand-ins for the Gluon backward kernels' operands (`attention_bwd_gluon` as G): a maker of [1, 1, S, D]
    row tensors, Q's and dO's bytes, K's with its token-block copy, and S (4 token blocks)."""
    import torch

    f8, seq, d = torch.float8_e4m3fn, 4 * G.TB, G.TB
    rows = lambda dtype: torch.empty(1, 1, seq, d, dtype=dtype)  # noqa: E731
    q, do = argparse.Namespace(vals=rows(f8)), argparse.Namespace(vals=rows(f8))
    k = argparse.Namespace(vals=rows(f8), off=argparse.Namespace(vals=rows(f8)))
    return rows, q, do, k, seq


def gluon_dkdv_report(ws: bool = False, fp8_dk: bool = False, ds_out: bool = False, ds_fp8: bool = False,
                      fold_k: bool = False, fold_v: bool = False) -> dict:
    """compile_report for the sm_90 Gluon dK/dV kernel (`attention_bwd_gluon`; the fp8 fast path's launch), or with
    ws its warp-specialized form (`attention_dkdv_ws`, launch option ws_dkdv: registers are the launch's maxnreg, the
    consumer warpgroup holding 2 × that − the producer's); fp8_dk (ws only): with its dK product in FP8 (launch
    option fp8_dk, against Q8ᵀ); ds_out (ws only): storing dS for `dq_from_ds` (launch option ds_out), ds_fp8 in E4M3
    (with launch option fp8_dq); fold_k (ws only): K's backward copies made in the kernel (launch option fold_k),
    fold_v with it V's (`attention_bwd.FOLD_V`)."""
    import torch
    from triton.runtime.jit import mangle_type

    _import_kernels()
    from flamia_kernels import attention_bwd_gluon as G
    from flamia_kernels import attention_dkdv_ws as W

    f8, bf = torch.float8_e4m3fn, torch.bfloat16
    rows, q, do, k, seq = _gluon_backward_operands(G)
    consts = dict(D=G.TB, BN=G.BN, BM=G.BM, TB=G.TB, STAGES=G.STAGES, STATS_ROWS=G.STATS_ROWS)
    kernel, options = G._dkdv_gluon_kernel, {"num_warps": G.warps_for(G.BN)}
    if ws:
        kernel, consts, options = (W._dkdv_ws_kernel, {**W.constexprs(), "FP8_DK": False},
                                   {**options, "maxnreg": W.MAXNREG})
    stats = torch.empty(1, G.STATS_ROWS, seq)
    dot = rows(f8).transpose(-1, -2).contiguous()  # dO8ᵀ
    descs = list(G.descriptors(q, k, do, rows(bf), dot, rows(f8), rows(f8), stats))
    if fp8_dk:
        from triton.experimental.gluon import language as gl

        descs[2] = G._cols_desc(rows(f8).transpose(-1, -2).contiguous(), G.BM, gl.float8e4nv)  # Q8ᵀ
        consts = {**consts, "FP8_DK": True}
    # KS, KBS, VS, VBS, TAU (and SIG), dK, dV (and KBF, KBBF: bf16 rows, or with fold_k over the fp8 buffer K's
    # bytes K-major), the scales, S, G
    k_t = fold_k and ds_fp8
    kinds = (["*fp32"] * (6 if ws else 5) + ["*bf16"] * 2 + (["*fp8e4nv" if k_t else "*bf16"] * 2 if ws else [])
             + ["fp32", "fp32", "i32", "i32"])
    if ws:  # the dS buffer's descriptor (ds_out), else a stand-in of the kernel's type
        y_desc = G.ds_descriptor(G.ds_buffer(1, 1, seq, "cpu", ds_fp8), G.BN, G.BM) if ds_out else descs[2]
        # and BH0, the launch's first K / V head; Vᵀ's descriptor (fold_v), else K's as a stand-in
        vt_desc = G._cols_desc(rows(f8).transpose(-1, -2).contiguous(), G.BN, _gluon_fp8()) if fold_v else descs[4]
        kinds += [mangle_type(y_desc), "i32", mangle_type(vt_desc)]
        consts = {**consts, "DS_OUT": ds_out, "FOLD_K": fold_k, "K_T": k_t, "FOLD_V": fold_v}
    ptx = _compile_gluon(kernel, descs, kinds, consts, options)
    stages = consts["STAGES"]
    return {"config": f"{G.warps_for(G.BN)}x{stages}x{G.BM}:bn{G.BN}:pre:gluon" + (":wsdkdv" if ws else "")
            + (":fp8dk" if fp8_dk else "") + (":dsout" if ds_out else "") + (":fp8" if ds_out and ds_fp8 else "")
            + (":foldk" if fold_k else "") + (":foldv" if fold_v else ""),
            **ptxas_report(ptx), "mma": mma_kinds(ptx), "loop_spills": loop_spills(ptx)}


def _gluon_fp8():
    """Gluon's E4M3 dtype (imported only where a Gluon kernel is compiled)."""
    from triton.experimental.gluon import language as gl

    return gl.float8e4nv


def _bwd_gluon_width() -> int:
    _import_kernels()
    from flamia_kernels import attention_bwd_gluon as G

    return G.BN


def gluon_dq_report(bn: int, fp8_dq: bool = False) -> dict:
    """compile_report for the sm_90 Gluon dQ kernel (`attention_bwd_gluon.dq`, launch option gluon_dq) on key
    sub-tiles of bn, at the registers its launch caps (MAXNREG_DQ[bn]: four programs per SM for 32, three for 64);
    fp8_dq: with its dQ product in FP8 (launch option fp8_dq, against K8ᵀ)."""
    import torch

    _import_kernels()
    from flamia_kernels import attention_bwd_gluon as G

    f8, bf = torch.float8_e4m3fn, torch.bfloat16
    rows, q, do, k, _ = _gluon_backward_operands(G)
    copies = (None, None, rows(bf), rows(bf), rows(f8), rows(f8))
    consts = dict(D=G.TB, BM=G.DQ_BM, BN=bn, TB=G.TB, STAGES=G.DQ_STAGES[bn], FP8_DQ=fp8_dq)
    descs = list(G.dq_descriptors(q, k, do, copies, bn))
    if fp8_dq:
        from triton.experimental.gluon import language as gl

        kt = lambda: rows(f8).transpose(-1, -2).contiguous()  # noqa: E731  (K8ᵀ, its copy's)
        descs[6:8] = [G._cols_desc(kt(), bn, gl.float8e4nv), G._cols_desc(kt(), bn, gl.float8e4nv)]
    ptx = _compile_gluon(G._dq_gluon_kernel, descs,
                         ["*fp32", "*fp32", "*i8", "*fp32", "*fp32"] + ["*fp32"] * 5
                         + ["*bf16", "fp32", "fp32", "i32", "i32"], consts,
                         {"num_warps": G.warps_for(G.DQ_BM), "maxnreg": G.MAXNREG_DQ[bn]})
    config = (f"{G.warps_for(G.DQ_BM)}x{G.DQ_STAGES[bn]}x{bn}:bm{G.DQ_BM}:pre"
              + (":gluondq" if bn == 64 else ":gluondq32") + (":fp8dq" if fp8_dq else ""))
    return {"config": config, **ptxas_report(ptx), "mma": mma_kinds(ptx)}


def dq_from_ds_report(fp8: bool = False, pairs: bool = False, warps: int | None = None,
                      stages: int | None = None, one_loop: bool = False) -> dict:
    """compile_report for `dq_from_ds` (launch option ds_out's dQ product, Triton) at its launch: over a bf16 dS buffer
    against K's bf16 copies, or fp8 (with fp8_dq) an E4M3 one against K8ᵀ; "byte_ops" counts its byte-wide shared
    loads and stores (a transposition of fp8 bytes one by one: the fp8 buffer is stored K-major to avoid them).
    pairs: the two-query-block kernel (`dq_from_ds.PAIRS`) at warps × stages (default: the module's). one_loop: one
    loop over every key block (`dq_from_ds.ONE_LOOP`); "loops" counts the kernel's loops and "barriers" its CTA
    barriers (the two-loop form moves its diagonal tiles through registers, with barriers between the steps)."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    import_for_gpu()
    from flamia_kernels import dq_from_ds as M

    kind = "*fp8e4nv" if fp8 else "*bf16"
    sig = {"Y": kind, "KBF": kind, "KBBF": kind, "RHO": "*fp32", "DQ": "*bf16", "sm_scale": "fp32", "S": "i32",
           "G": "i32", "BH0": "i32", "D": "constexpr", "QB": "constexpr", "BN": "constexpr", "TB": "constexpr",
           "FP8": "constexpr", "INTERP": "constexpr"}
    consts = dict(D=128, QB=M.QB, BN=M.BN, TB=M.TB, FP8=fp8, INTERP=False)
    if one_loop:
        sig, consts = {**sig, "ONE_LOOP": "constexpr"}, {**consts, "ONE_LOOP": True}
    # pointers 16-byte aligned and S a multiple of 16, as Triton specializes the real launch
    attrs = {(i,): [["tt.divisibility", 16]] for i in (0, 1, 2, 3, 4, 6)}
    warps, stages = warps or M.WARPS, stages or M.STAGES["fp8" if fp8 else "bf16"]  # the module's launch
    kernel = M._dq_from_ds_pairs_kernel if pairs else M._dq_from_ds_kernel
    compiled = triton.compile(ASTSource(fn=kernel, signature=sig, constexprs=consts, attrs=attrs),
                              target=GPUTarget("cuda", 90, 32), options={"num_warps": warps, "num_stages": stages})
    ptx = compiled.asm["ptx"]
    return {"config": f"{warps}x{stages}:qb{M.QB}" + (":pairs" if pairs else "") + (":oneloop" if one_loop else "")
            + (":fp8" if fp8 else ""),
            **ptxas_report(ptx), "shared": compiled.metadata.shared,
            "mma": mma_kinds(ptx), "byte_ops": len(re.findall(r"\b(?:ld|st)\.shared\.(?:b8|u8|s8)\b", ptx)),
            "loops": len(re.findall(r"Loop Header", ptx)), "barriers": len(re.findall(r"\bbar\.sync\b", ptx))}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kernels", nargs="+", choices=("fwd", "dkdv", "dq", "fwd_gluon", "dkdv_gluon", "dq_gluon",
                                                     "dq_from_ds", "dq_from_ds_pairs"),
                    default=["fwd", "dkdv", "dq"],
                    help="fwd_gluon / dkdv_gluon / dq_gluon: the sm_90 Gluon forward / dK/dV / dQ kernel (fp8, D = "
                         "128; the forward's configs :gluon[:chain|:pipeN], its stages follow the variant; dq_gluon "
                         "compiles key sub-tiles of 64 and 32)")
    ap.add_argument("--configs", nargs="*", type=parse_config, default=[],
                    help="launch configs to add to each kernel's default, e.g. 8x2x32 8x1x16:atomic")
    ap.add_argument("--spec", default="fp8", help="an AttentionSpec preset or per-operand string")
    ap.add_argument("--dim", type=int, default=128, choices=(64, 128))
    ap.add_argument("--non-causal", action="store_true")
    ap.add_argument("--no-off-diagonal", action="store_true", help="per-token K/V on every tile (doc masking)")
    ap.add_argument("--leaky", action="store_true", help="safeguards=False")
    ap.add_argument("--target", type=int, default=90, choices=(90, 100), help="sm_90 (Hopper) or sm_100 (Blackwell)")
    ap.add_argument("--qk-mx", action="store_true", help="forward: the block-scaled QKᵀ (spec with qk=mxfp8)")
    ap.add_argument("--mma", action="store_true", help="also list the tensor-core instructions of each kernel")
    ap.add_argument("--no-grad", action="store_true",
                    help="fwd_gluon: the kernel of a forward nothing differentiates (no O8 copy, no Q bytes)")
    args = ap.parse_args(argv)
    print(f"sm_{args.target}, spec {args.spec}, D={args.dim}, causal={not args.non_causal}, "
          f"off-diagonal copies={not args.no_off_diagonal}" + (", block-scaled QKᵀ" if args.qk_mx else ""))
    print(f"{'kernel':9s} {'config':28s} {'regs':>5s} {'spill st':>9s} {'spill ld':>9s}")
    for kernel in args.kernels:
        for cfg in [{}, *args.configs]:
            forward = kernel in ("fwd", "fwd_gluon")
            if (kernel == "fwd" and {"sub", "dq", "bn"} & set(cfg) or not forward and {"BPTR", "fuse_q"} & set(cfg)
                    or kernel == "dkdv" and "bm" in cfg or kernel == "dq" and "bn" in cfg):
                continue  # a backward-only option for the forward, or the forward's for the backward
            if args.qk_mx and kernel != "fwd":
                continue  # the block-scaled QKᵀ is the forward's
            if cfg and kernel.endswith("_gluon") != bool(cfg.get("gluon")):
                continue  # the Gluon kernels' configs say :gluon, the Triton kernels' do not
            if kernel in ("dq_gluon", "dkdv_gluon") and cfg:
                continue  # their launches are compiled below: the fast path's (dQ: both key sub-tiles)
            if kernel == "dq_gluon":  # (report, is the default launch)
                reports = [(gluon_dq_report(64), False), (gluon_dq_report(32), True),
                           (gluon_dq_report(32, True), False)]
            elif kernel == "dkdv_gluon":
                # the warp-specialized form (the fast path's default) is written for one warpgroup of 64 keys
                ws = _bwd_gluon_width() == 64
                reports = [(gluon_dkdv_report(), not ws)]
                if ws:
                    reports += [(gluon_dkdv_report(True), True), (gluon_dkdv_report(True, True), False),
                                (gluon_dkdv_report(True, ds_out=True), False),
                                (gluon_dkdv_report(True, ds_out=True, ds_fp8=True), False),
                                (gluon_dkdv_report(True, ds_out=True, fold_k=True), False),
                                (gluon_dkdv_report(True, ds_out=True, ds_fp8=True, fold_k=True), False),
                                (gluon_dkdv_report(True, ds_out=True, ds_fp8=True, fold_k=True, fold_v=True), False)]
            elif kernel == "dq_from_ds":
                # one loop is the default launch since session 31 (`dq_from_ds.ONE_LOOP`)
                reports = [(dq_from_ds_report(), False), (dq_from_ds_report(True), False),
                           (dq_from_ds_report(one_loop=True), True), (dq_from_ds_report(True, one_loop=True), False)]
            elif kernel == "dq_from_ds_pairs":  # option PAIRS at the launches session 29 set up to time
                reports = [(dq_from_ds_report(fp8, True, w, st), False) for fp8 in (False, True)
                           for w, st in ((8, 2), (8, 3), (16, 2))]
            elif kernel == "fwd_gluon":
                if (args.spec, args.dim, args.target, args.non_causal, args.no_off_diagonal) != ("fp8", 128, 90, False,
                                                                                                   False):
                    ap.error("fwd_gluon: the fp8 spec, D = 128, sm_90, causal, with the off-diagonal copies only")
                reports = [(gluon_forward_report(cfg, not args.leaky, args.no_grad), not cfg)]
            else:
                reports = [(compile_report(kernel, cfg, args.spec, args.dim, not args.non_causal,
                                           not args.no_off_diagonal, not args.leaky, args.target, args.qk_mx), not cfg)]
            for r, default in reports:
                label = r["config"] + (" (default)" if default else "")
                print(f"{kernel:9s} {label:28s} {r['registers']:5d} {r['spill_stores']:9d} {r['spill_loads']:9d}",
                      flush=True)
                if r["serialized"]:
                    print("       ptxas serialized this kernel's wgmma (C751x)", flush=True)
                if args.mma:
                    print("       mma: " + ", ".join(r["mma"]), flush=True)
                if r.get("spill_stores") and "loop_spills" in r:
                    print(f"       spill instructions inside its innermost wgmma loops: {r['loop_spills']}", flush=True)
                if "byte_ops" in r:
                    print(f"       byte-wide shared loads / stores: {r['byte_ops']}", flush=True)
                if "loops" in r:
                    print(f"       loops: {r['loops']}, CTA barriers: {r['barriers']}", flush=True)
                if kernel == "dq_from_ds_pairs":
                    print(f"       shared memory: {r['shared']} B", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
