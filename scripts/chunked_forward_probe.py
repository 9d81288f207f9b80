"""Probe: the fp8 forward in chunks of heads, each chunk's key-side pass on a high-priority side stream ahead of
the forward kernels, against the one-launch forward and cuDNN (CUDA only; timing, not a test).

    python scripts/chunked_forward_probe.py --seqs 8192 16384 --chunks 4 8 16

Why: a no_grad forward at S = 8k is the key-side pass (~0.17 ms, memory-bound: K and V read in bf16, their fp8
bytes and token-block copies written) and then the Gluon forward (~1.39 ms, latency-bound, L2-fed); the kernel
alone runs 1.22x cuDNN, the call 1.09x (session 20, scripts/launch_gaps.py). Chunk c's forward needs only chunk c's
K and V, so the passes of chunks c + 1.. can run while chunk c's forward computes: on a higher-priority stream the
block scheduler puts their programs on each SM a forward program leaves. Only chunk 0's pass stays exposed.
The chunk outputs are not assembled (the probe times the overlap); the chunked O is compared with the one-launch O.
Never imported by the package.
"""
from __future__ import annotations

import argparse
import math
import statistics

import torch
from bench_attention import alternating_readings, cuda_stamp, peer_fn, shape_for
from flamia_kernels import AttentionSpec, attention_fwd, flamia_attention
from flamia_kernels import quantize as QZ
from flamia_kernels.attention_operands import prepare_forward

SPEC = AttentionSpec.parse("fp8")


def chunked_forward(q, k, v, chunks: int, side: torch.cuda.Stream) -> list[torch.Tensor]:
    """O of each chunk of heads (q, k, v: [B, H, S, D], no GQA): key-side passes on `side`, forwards on the caller's
    stream, each behind its chunk's pass."""
    b, h, s, d = q.shape
    bh = b * h
    step = bh // chunks
    flat = [x.reshape(1, bh, s, d) for x in (q, k, v)]
    main = torch.cuda.current_stream()
    side.wait_stream(main)  # the inputs, and the previous call's forwards before their memory is reused
    parts = []
    with torch.cuda.stream(side):
        for c in range(chunks):
            qc, kc, vc = (x[:, c * step:(c + 1) * step] for x in flat)
            ops = prepare_forward(qc, kc, vc, SPEC, True, QZ, 128, v_transposed=True, quantize_q=False)
            ops.q = attention_fwd.fused_q_operand(qc)
            done = torch.cuda.Event()
            done.record(side)
            parts.append((qc, ops, done))
    outs = []
    for qc, ops, done in parts:
        main.wait_event(done)
        o = attention_fwd.forward(ops.q, ops.k, ops.v, SPEC, True, True, 1.0 / math.sqrt(d), 128, False,
                                  q_raw=qc)[0]
        outs.append(o)
    side.wait_stream(main)
    return outs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seqs", type=int, nargs="+", default=[8192, 16384])
    ap.add_argument("--chunks", type=int, nargs="+", default=[4, 8, 16])
    ap.add_argument("--calls", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    side = torch.cuda.Stream(priority=-1)
    for seq in args.seqs:
        b, h, s, d = shape_for(seq, 128)
        gen = torch.Generator(device="cuda").manual_seed(seq)
        q, k, v = (torch.randn(b, h, s, d, device="cuda", generator=gen, dtype=torch.bfloat16) for _ in range(3))
        with torch.no_grad():
            whole = flamia_attention(q, k, v, "fp8").reshape(1, b * h, s, d)
            for n in args.chunks:
                got = torch.cat(chunked_forward(q, k, v, n, side), dim=1)
                torch.cuda.synchronize()
                print(f"S={seq} chunks={n}: O bit-identical to the one-launch forward: {torch.equal(got, whole)}",
                      flush=True)
        entries = [("fp8", lambda q=q, k=k, v=v: flamia_attention(q, k, v, "fp8"), None)]
        entries += [(f"fp8 x{n}", lambda n=n, q=q, k=k, v=v: chunked_forward(q, k, v, n, side), None)
                    for n in args.chunks]
        entries += [("cudnn", peer_fn("cudnn", q, k, v), None)]
        cache = torch.empty(256 * 1024 * 1024 // 4, dtype=torch.int32, device="cuda")

        def run(fn, launch, mode):
            with torch.no_grad():
                fn()

        rounds: dict = {}
        for _ in range(args.rounds):
            for key, ms in alternating_readings(entries, ["fwd"], args.calls, run, cuda_stamp, cache.zero_).items():
                rounds.setdefault(key[0], []).append(statistics.median(ms))
        ref = statistics.median(rounds["cudnn"])
        for name, ms in rounds.items():
            med = statistics.median(ms)
            print(f"S={seq:6d} {name:10s} {med:7.3f} ms  x cuDNN {ref / med:5.3f}  rounds "
                  + " ".join(f"{x:.3f}" for x in ms), flush=True)


if __name__ == "__main__":
    main()
