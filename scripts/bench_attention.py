"""Benchmark FLAMIA attention against SDPA (cuDNN, flash) and FlexAttention on one GPU.

TFLOP/s of causal attention, fwd and fwd+bwd (FLOPs = 4·B·H·S²·D·0.5 forward, ×3.5 for
fwd+bwd): by default the median of single calls that alternate between the implementations (each after an
L2 flush, as do_bench's, queued without a synchronize between them, so the host runs ahead of the GPU where
it is the faster), in --rounds rounds, the median round kept with the rounds' range; with --timing ahead the
same calls each behind a 3 ms GPU sleep (the host certainly ahead; the GPU's clock then differs, see
`cuda_stamp_ahead`); with --timing do_bench, triton.testing.do_bench's median of
each implementation's own block of calls, for the FLAMIA presets
(fp8 is the fast path; mxfp8 / nvfp4 are EMULATED on Hopper: exact format numerics in bf16 products, never a
speed-up) and the bf16 peers; the bytes each preset saves for the backward against bf16's;
optionally the accuracy against exact attention, a launch-config sweep and a time profile.
Writes <out>/bench_attention.json and <out>/bench_attention.md, prints the table last.

    python scripts/bench_attention.py                          # the full table (GPU)
    python scripts/bench_attention.py --seqs 8192 --dims 128 --presets fp8 --peers cudnn
    python scripts/bench_attention.py --accuracy-only --seqs 2048 --dims 128   # CPU works too
Never imported by the package.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from flamia_kernels import AttentionSpec, flamia_attention, reference
from flamia_kernels import attention as attn
from launch_configs import launch_overrides, load_launch, parse_configs
from provenance import commit_label

TOKENS = {64: 32, 128: 16}  # heads per D (d_model 2048); batch = 32768 tokens / S


def shape_for(seq: int, dim: int) -> tuple[int, int, int, int]:
    """(B, H, S, D) that fills the GPU: 32k tokens per batch, d_model 2048."""
    return max(1, 32768 // seq), TOKENS[dim], seq, dim


def flops(b, h, s, d, mode: str) -> float:
    fwd = 4 * b * h * s * s * d * 0.5
    return fwd if mode == "fwd" else 3.5 * fwd


def bench(fn) -> float:
    """Median milliseconds."""
    from triton.testing import do_bench

    return do_bench(fn, warmup=25, rep=100, return_mode="median")


def peer_fn(name: str, q, k, v):
    """Forward callable of a bf16 peer."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    if name in ("cudnn", "flash"):
        backend = SDPBackend.CUDNN_ATTENTION if name == "cudnn" else SDPBackend.FLASH_ATTENTION

        def run():
            with sdpa_kernel([backend]):
                return F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return run
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    flex = torch.compile(flex_attention)
    mask = create_block_mask(lambda b, h, qi, ki: qi >= ki, None, None, q.shape[2], q.shape[2], device=q.device)
    return lambda: flex(q, k, v, block_mask=mask)


def one_call(fwd, do, mode: str, leaves=()) -> None:
    """One call of what the table times: the forward under no_grad ("fwd"), or forward and backward.

    leaves: the call's leaf inputs (q, k, v), whose gradients are dropped before each backward. Why: a backward
    into leaves that already hold gradients adds the new ones to them — three bf16 additions of Q's, K's and V's
    size (~0.39 ms at S = 8k on an H100, session 31's launch_gaps.py), the same for every implementation and no
    part of attention; in training Q, K and V come out of projections, whose backward takes the gradients as they
    are. Timings before session 31 included them."""
    if mode == "fwd":
        with torch.no_grad():
            fwd()
    else:
        for x in leaves:
            x.grad = None
        fwd().backward(do)


def timed(fwd, q, k, v, do, mode: str) -> float:
    if mode == "fwd":
        with torch.no_grad():
            return bench(fwd)
    return bench(lambda: one_call(fwd, do, mode, (q, k, v)))


def report_failure(name: str, mode: str, err: Exception) -> None:
    print(f"  {name} {mode} failed: {err!s:.200}", flush=True)


def interleaved_readings(entries, modes, rounds: int, measure, log=None) -> dict:
    """{(name, mode): [ms per round]}: every (name, fn, launch) entry timed once per mode per round,
    `measure(fn, launch, mode)`, the rounds one after another, so that a drift of the GPU's clocks over the
    run reaches every implementation alike (rows then keep the median round). A failing entry (a peer
    missing on this build) reads NaN and the run goes on."""
    readings: dict = {}
    for rnd in range(rounds):
        for name, fn, launch in entries:
            for mode in modes:
                try:
                    ms = measure(fn, launch, mode)
                except Exception as err:
                    ms = float("nan")
                    report_failure(name, mode, err)
                readings.setdefault((name, mode), []).append(ms)
                if log is not None:
                    log(name, mode, ms, rnd)
    return readings


def alternating_readings(entries, modes, calls: int, run, stamp, flush=lambda: None, log=report_failure) -> dict:
    """{(name, mode): [ms of each call]}: per mode, `calls` times every (name, fn, launch) entry once, in an
    order rotated by one each time, each call after flush() and timed by stamp(thunk) (a reader of its
    milliseconds, read after all calls: CUDA events on the GPU). Why: the H200 holds its 700 W cap by lowering
    its SM clock (1980 MHz down to a median of 1755, 1410-1965) for tens of milliseconds at a time, so the
    back-to-back blocks of do_bench, one implementation after another, each time a different clock; calls that
    alternate share them (session 11, scripts/fwd_timing_probe.py). An entry whose warm-up call fails reads NaN
    and sits out (log: how its failure is reported)."""
    readings: dict = {}
    for mode in modes:
        live = []
        for name, fn, launch in entries:
            try:
                run(fn, launch, mode)
                live.append((name, fn, launch))
            except Exception as err:
                readings[(name, mode)] = [float("nan")]
                log(name, mode, err)
        pending = []
        for i in range(calls):
            k = i % max(1, len(live))
            for name, fn, launch in live[k:] + live[:k]:
                flush()
                pending.append(((name, mode), stamp(lambda fn=fn, launch=launch, mode=mode: run(fn, launch, mode))))
        for key, read in pending:
            readings.setdefault(key, []).append(read())
    return readings


def cuda_stamp(thunk):
    """Runs thunk between two CUDA events; returns the reader of their milliseconds."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    thunk()
    end.record()
    return lambda: (end.synchronize(), start.elapsed_time(end))[1]


def named_launch(arg: str) -> tuple[str, dict]:
    """--launch [NAME=]FILE: (NAME or "launch", the file's launch options)."""
    name, sep, path = arg.partition("=")
    if not sep or "/" in name:  # a path with "=" in it, no NAME
        name, path = "launch", arg
    if not name or "[" in name or "]" in name:
        raise argparse.ArgumentTypeError(f"--launch {arg}: NAME must be non-empty and without brackets")
    return name, load_launch(path)


def sleep_cycles(ms: float) -> int:
    """Cycles of `torch.cuda._sleep` for about ms at the SM clock the device reports (the H200's 1980 MHz boost
    where it reports none)."""
    khz = getattr(torch.cuda.get_device_properties(0), "clock_rate", 0) or 1_980_000
    return int(ms * khz)


def cuda_stamp_ahead(thunk, sleep_ms: float = 3.0):
    """`cuda_stamp` with the host certainly ahead: the GPU sleeps (`torch.cuda._sleep`) before the start event
    while the host enqueues the call. Not a pure GPU-time reading: on the H200 (6900581) the forward read 5-7%
    lower and the 16k / 32k forward + backward 1-8% higher than the default timing for fp8 and cuDNN alike (the
    clock after a sleep differs from the clock after back-to-back work); docs/benchmarks.md, session 18."""
    torch.cuda._sleep(sleep_cycles(sleep_ms))
    return cuda_stamp(thunk)


def speed_one(args, rows: list, seq: int, dim: int) -> None:
    b, h, s, d = shape_for(seq, dim)
    gen = torch.Generator(device="cuda").manual_seed(seq + dim)
    q, k, v, do = (torch.randn(b, h, s, d, device="cuda", generator=gen, dtype=torch.bfloat16) for _ in range(4))
    q, k, v = (x.requires_grad_(True) for x in (q, k, v))
    entries = [(p, lambda p=p: flamia_attention(q, k, v, p), None) for p in args.presets]
    for tag, launch in args.launch:  # the same presets again under each --launch (`launch_overrides` says where)
        entries += [(f"{p} [{tag}]", lambda p=p: flamia_attention(q, k, v, p), launch) for p in args.presets]
    entries += [(f"{p} (bf16 peer)", peer_fn(p, q, k, v), None) for p in args.peers]

    def measure(fn, launch, mode: str) -> float:
        with launch_overrides(launch):
            return timed(fn, q, k, v, do, mode)

    def log(name: str, mode: str, ms: float, rnd: int) -> None:
        tf = flops(b, h, s, d, mode) / ms / 1e9
        print(f"  S={s:6d} D={d:3d} {name:22s} {mode:7s} {ms:8.3f} ms {tf:7.1f} TFLOP/s (round {rnd + 1} of "
              f"{args.rounds})", flush=True)

    if args.timing in ("alternating", "ahead"):
        cache = torch.empty(256 * 1024 * 1024 // 4, dtype=torch.int32, device="cuda")  # do_bench's L2 flush

        def run(fn, launch, mode: str) -> None:
            with launch_overrides(launch):
                one_call(fn, do, mode, (q, k, v))

        readings: dict = {}
        for rnd in range(args.rounds):
            stamp = cuda_stamp if args.timing == "alternating" else cuda_stamp_ahead
            calls = alternating_readings(entries, args.modes, args.calls, run, stamp, cache.zero_)
            for (name, mode), ms in calls.items():
                readings.setdefault((name, mode), []).append(statistics.median(ms))
                log(name, mode, readings[(name, mode)][-1], rnd)
        del cache
    else:
        readings = interleaved_readings(entries, args.modes, args.rounds, measure, log)
    for (name, mode), runs in readings.items():
        ms = statistics.median(runs)
        emulated = "peer" not in name and AttentionSpec.parse(name.split(" [")[0]).emulated
        rows.append(dict(kind="speed", name=name, mode=mode, B=b, H=h, S=s, D=d, ms=ms,
                         tflops=flops(b, h, s, d, mode) / ms / 1e9, ms_rounds=runs, emulated=emulated))


def run_speed(args, rows: list, save) -> None:
    emulated = [p for p in args.presets if AttentionSpec.parse(p).emulated]
    for dim in args.dims:
        for seq in args.seqs:
            presets = [p for p in args.presets if p not in emulated or seq in args.emulated_seqs]
            speed_one(argparse.Namespace(**{**vars(args), "presets": presets}), rows, seq, dim)
            torch.cuda.empty_cache()
            save()


def run_saved_bytes(args, rows: list) -> None:
    for dim in args.dims:
        b, h, s, d = shape_for(min(args.seqs), dim)
        q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        bf16 = 2 * (4 * q.numel()) + 4 * q.numel() // d  # Q, K, V, O bf16 + fp32 LSE
        for p in args.presets:
            got = attn.saved_bytes(q, k, v, p)
            rows.append(dict(kind="saved", name=p, D=d, bytes=got, bf16_bytes=bf16, ratio=got / bf16))
            print(f"  saved D={d} {p:10s} {got / bf16:.3f} x bf16", flush=True)


def _cos(a, b) -> float:
    return F.cosine_similarity(a.double().flatten(), b.double().flatten(), dim=0).item()


def _rel(a, b) -> float:
    return ((a.double() - b.double()).norm() / b.double().norm()).item()


def _grads(fn, xs, do, dtype):
    xs = [x.detach().to(dtype).requires_grad_(True) for x in xs]
    o = fn(*xs)
    o.backward(do.to(o.dtype))
    return [o.detach()] + [x.grad for x in xs]


def run_accuracy(args, rows: list, device: str) -> None:
    """Cosine and relative L2 of O, dQ, dK, dV against fp32 attention (N(0,1) inputs).
    On a CPU this runs reference.attention (the same math as the kernels)."""
    fn = flamia_attention if device == "cuda" else reference.attention
    seq = args.seqs[0]
    for dim in args.dims:
        gen = torch.Generator(device=device).manual_seed(7)
        b, h = 1, 4 if device == "cuda" else 1
        qkv = [torch.randn(b, h, seq, dim, device=device, generator=gen).to(torch.bfloat16) for _ in range(3)]
        do = torch.randn(b, h, seq, dim, device=device, generator=gen).to(torch.bfloat16)
        exact = _grads(lambda *x: reference.attention(*x, "bf16"), qkv, do, torch.float32)
        for p in ["bf16"] + list(args.presets):
            got = _grads(lambda *x, p=p: fn(*x, p), qkv, do, torch.bfloat16)
            row = dict(kind="accuracy", name=p, S=seq, D=dim, device=device)
            for n, a, e in zip(("O", "dQ", "dK", "dV"), got, exact, strict=True):
                row[f"cos_{n}"], row[f"rel_{n}"] = _cos(a, e), _rel(a, e)
            rows.append(row)
            print(f"  acc S={seq} D={dim} {p:32s} " + " ".join(
                f"{n} cos {row[f'cos_{n}']:.4f} rel {row[f'rel_{n}']:.4f}" for n in ("O", "dQ", "dK", "dV")),
                flush=True)


def profile_parts(args, seq: int) -> tuple[dict, tuple]:
    """Callables for each stage of the fp8 fwd+bwd at one shape (D = --profile-dim), each with the kernel and
    launch config it sweeps (None for the fixed stages)."""
    from flamia_kernels import attention_bwd, attention_bwd_copies, attention_fwd
    from flamia_kernels import quantize as QZ
    from flamia_kernels.attention_operands import Operand, backward_delta, prepare_forward, quantize_operand
    from flamia_kernels.spec import SEQ_BLOCK

    spec = AttentionSpec.parse("fp8")
    shape = shape_for(seq, args.profile_dim)
    q, k, v, do = (torch.randn(*shape, device="cuda", dtype=torch.bfloat16) for _ in range(4))
    sm = 1.0 / math.sqrt(shape[-1])
    ops = prepare_forward(q, k, v, spec, True, QZ, SEQ_BLOCK, v_transposed=True)
    o, lse2, moff, o8, os_ = attention_fwd.forward(ops.q, ops.k, ops.v, spec, True, True, sm, SEQ_BLOCK, True)
    do8, sdo, delta, do8t = QZ.quantize_fp8_per_token_with_delta(do, o8, os_, transposed=True)
    do_op = Operand(do8, sdo[..., 0], do8t)  # as the autograd backward makes it (dO8ᵀ: the FP8 dV product's)
    fwd = lambda cfg=None: attention_fwd.forward(ops.q, ops.k, ops.v, spec, True, True, sm, SEQ_BLOCK, True,  # noqa
                                                 config=cfg)
    bwd = lambda cfg=None: attention_bwd.backward(ops.q, ops.k, ops.v, do_op, lse2, moff, delta, spec,  # noqa
                                                  True, True, sm, SEQ_BLOCK, config=cfg)
    # part name -> (callable, the kernel a launch sweep times: fwd, dkdv, dq, both or None, its config)
    parts = {
        "fwd pre-pass (quantize Q, K, V)": (lambda: prepare_forward(q, k, v, spec, True, QZ, SEQ_BLOCK, True),
                                            None, None),
        "fwd kernel": (fwd, None, None),
        "bwd pre-pass (quantize dO, dO8ᵀ, delta; fused)": (
            lambda: QZ.quantize_fp8_per_token_with_delta(do, o8, os_, transposed=True), None, None),
        "bwd pre-pass unfused (PyTorch delta)": (lambda: backward_delta(quantize_operand(do, "fp8", QZ),
                                                                        Operand(o8, os_)), None, None),
        "bwd copies for pre (bf16 Q, K; V rows)": (
            lambda: attention_bwd_copies.bf16_copies(ops.q, ops.k, ops.v, do_op, lse2, moff, delta), None, None),
        "bwd kernels (dK/dV + dQ)": (bwd, None, None),
    }
    for cfg in args.bwd_configs:
        parts[f"bwd kernels {cfg}"] = (lambda cfg=cfg: bwd(cfg), cfg.get("which", "both"), cfg)
    for cfg in args.fwd_configs:
        parts[f"fwd kernel {cfg}"] = (lambda cfg=cfg: fwd(cfg), "fwd", cfg)
    return parts, shape


def run_trace(args) -> None:
    """torch.profiler over a few fp8 fwd+bwd calls at the first S, D = --profile-dim: every CUDA kernel's
    share of the time (what the pre-passes, the attention kernels and the glue really cost)."""
    from torch.profiler import ProfilerActivity, profile

    b, h, s, d = shape_for(args.seqs[0], args.profile_dim)
    q, k, v, do = (torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16, requires_grad=i < 3)
                   for i in range(4))

    def step():
        one_call(lambda: flamia_attention(q, k, v, "fp8"), do, "fwdbwd", (q, k, v))

    for _ in range(3):
        step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(5):
            step()
        torch.cuda.synchronize()
    print(f"trace: fp8 fwd+bwd x5, B={b} H={h} S={s} D={d}", flush=True)
    print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=25), flush=True)


def run_profile(args, rows: list, save) -> None:
    """Where the fp8 fwd+bwd time goes: pre-pass, forward kernel, backward pre-pass, dK/dV + dQ.
    Saves after every part: a sweep cut short by its time box keeps what it measured."""
    for seq in args.seqs:
        parts, (b, h, s, d) = profile_parts(args, seq)
        for name, (fn, kernel, cfg) in parts.items():
            try:
                ms = bench(fn)
            except Exception as err:
                ms = float("nan")
                print(f"  profile {name} failed: {err!s:.300}", flush=True)
            rows.append(dict(kind="profile", name=name, S=s, D=d, B=b, H=h, ms=ms, kernel=kernel, config=cfg))
            print(f"  profile S={s} D={d} {name:40s} {ms:8.3f} ms", flush=True)
            save()
        torch.cuda.empty_cache()


def markdown(rows: list, meta: dict) -> str:
    timing = {"alternating": "single calls alternating between the implementations, each call's median",
              "ahead": "single calls alternating between the implementations with the host ahead (GPU time "
                       "only), each call's median"}.get(meta.get("timing"),
                                                       "triton.testing.do_bench, each implementation's median")
    out = [f"Command: `{meta['command']}`  ", f"Commit {meta['commit']}, {meta['date']}, {meta['gpu']}, "
           f"torch {meta['torch']}, triton {meta['triton']}; timing: {timing}", ""]
    speed = [r for r in rows if r["kind"] == "speed"]
    if speed:
        cudnn = {(r["S"], r["D"], r["mode"]): r["tflops"] for r in speed if r["name"].startswith("cudnn")}
        out += ["| S | D | B×H | impl | mode | ms | rounds' range, ms | TFLOP/s | × cuDNN |",
                "|---|---|---|---|---|---|---|---|---|"]
        for r in speed:
            ref = cudnn.get((r["S"], r["D"], r["mode"]), float("nan"))
            label = r["name"] + (" (emulated)" if r["emulated"] else "")
            runs = r.get("ms_rounds", [r["ms"]])
            out.append(f"| {r['S']} | {r['D']} | {r['B']}×{r['H']} | {label} | {r['mode']} | {r['ms']:.3f} | "
                       f"{min(runs):.3f}–{max(runs):.3f} ({len(runs)}) | {r['tflops']:.1f} | {r['tflops'] / ref:.2f} |")
    saved = [r for r in rows if r["kind"] == "saved"]
    if saved:
        out += ["", "| preset | D | saved bytes / bf16 |", "|---|---|---|"]
        out += [f"| {r['name']} | {r['D']} | {r['ratio']:.3f} |" for r in saved]
    acc = [r for r in rows if r["kind"] == "accuracy"]
    if acc:
        out += ["", "| preset | S | D | cos O | cos dQ | cos dK | cos dV | rel O | rel dQ | rel dK | rel dV |",
                "|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in acc:
            out.append(f"| {r['name']} | {r['S']} | {r['D']} | " + " | ".join(
                f"{r[f'cos_{n}']:.4f}" for n in ("O", "dQ", "dK", "dV")) + " | " + " | ".join(
                f"{r[f'rel_{n}']:.4f}" for n in ("O", "dQ", "dK", "dV")) + " |")
    prof = [r for r in rows if r["kind"] == "profile"]
    if prof:
        out += ["", "| S | D | part | ms |", "|---|---|---|---|"]
        out += [f"| {r['S']} | {r['D']} | {r['name']} | {r['ms']:.3f} |" for r in prof]
    return "\n".join(out) + "\n"


def _configs(text: str) -> list[dict]:
    """--fwd-configs / --bwd-configs: `launch_configs.parse_configs` (the syntax is documented there)."""
    return parse_configs(text)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ints = lambda s: [int(x) for x in s.split(",") if x]  # noqa: E731
    words = lambda s: [x for x in s.split(";" if ";" in s else ",") if x and x != "none"]  # noqa: E731
    ap.add_argument("--seqs", type=ints, default=[2048, 8192, 16384, 32768])
    ap.add_argument("--dims", type=ints, default=[64, 128])
    ap.add_argument("--presets", type=words, default=["fp8", "nvfp4-fp8", "mxfp8", "nvfp4"],
                    help="comma-separated presets, or ';'-separated specs such as 'qk=fp8,pv=fp8;fp8'")
    ap.add_argument("--peers", type=words, default=["cudnn", "flash", "flex"])
    ap.add_argument("--modes", type=words, default=["fwd", "fwdbwd"])
    ap.add_argument("--rounds", type=int, default=3,
                    help="time every implementation this many times, round after round; rows keep the median")
    ap.add_argument("--timing", choices=("alternating", "ahead", "do_bench"), default="alternating",
                    help="alternating (default): single calls that alternate between the implementations (--calls "
                         "each a round), so that they share the GPU's clocks, which its power cap moves; ahead: the "
                         "same, each call behind a 3 ms GPU sleep so the host is certainly ahead; do_bench: each "
                         "implementation's block of calls in turn")
    ap.add_argument("--calls", type=int, default=40, help="--timing alternating: calls of each implementation a round")
    ap.add_argument("--emulated-seqs", type=ints, default=[8192],
                    help="sequence lengths at which the emulated presets are timed (they are slow)")
    ap.add_argument("--accuracy", action="store_true", help="also the accuracy table (first S only)")
    ap.add_argument("--accuracy-only", action="store_true", help="only the accuracy table (CPU: reference)")
    ap.add_argument("--profile", action="store_true", help="also the fp8 time profile (D = --profile-dim)")
    ap.add_argument("--profile-dim", type=int, choices=sorted(TOKENS), default=128,
                    help="head dim of --profile and --trace (default 128; every S of --seqs)")
    ap.add_argument("--trace", action="store_true", help="also torch.profiler's kernel table of fp8 fwd+bwd")
    ap.add_argument("--fwd-configs", type=_configs, default=[], help="profile sweep, e.g. 8x3,4x3")
    ap.add_argument("--bwd-configs", type=_configs, default=[], help="profile sweep, e.g. 8x2,4x2")
    ap.add_argument("--launch", type=named_launch, action="append", default=[],
                    help="[NAME=]FILE, repeatable: a JSON {\"fwd\": {...}, \"bwd\": {...}} of launch options "
                         "(scripts/pick_launch.py writes it); each preset also runs under each file, as '<preset> "
                         "[NAME]' rows ('[launch]' without a NAME)")
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    args = ap.parse_args()
    if args.rounds < 1:
        ap.error(f"--rounds {args.rounds}: allowed 1 or more")
    if args.calls < 1:
        ap.error(f"--calls {args.calls}: allowed 1 or more")
    rows: list = []
    device = "cuda" if torch.cuda.is_available() else "cpu"
    import triton

    meta = dict(command="python " + " ".join(sys.argv), timing=args.timing,
                date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                commit=commit_label(Path(__file__).resolve().parents[1]),
                gpu=torch.cuda.get_device_name() if device == "cuda" else "cpu",
                torch=torch.__version__, triton=triton.__version__)
    print(json.dumps(meta), flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    def save() -> str:
        """Write what is measured so far (a run cut short still leaves its rows)."""
        (out / "bench_attention.json").write_text(json.dumps(dict(meta=meta, rows=rows), indent=1))
        table = markdown(rows, meta)
        (out / "bench_attention.md").write_text(table)
        return table

    if args.accuracy or args.accuracy_only:
        run_accuracy(args, rows, device)
        save()
    if not args.accuracy_only:
        run_saved_bytes(args, rows)
        if args.trace:
            run_trace(args)
        if args.profile:
            run_profile(args, rows, save)
            save()
        run_speed(args, rows, save)
    print(save())


if __name__ == "__main__":
    main()
