#!/usr/bin/env python
"""Long-context evaluation of a checkpoint: held-out loss by position, and the parallel-vs-AR gap.

    python scripts/eval_context.py runs/x/checkpoints/step_00001000 --seq-len 4096
    python scripts/eval_context.py runs/x/export/model_step00001000.safetensors --model gpt-125m \\
        --attention fp8 --ar-seqs 2 --ar-len 256 --out eval.json

Prints the mean held-out loss per log2 bucket of positions ([0,16), [16,32), ... up to
--seq-len) and, on --ar-seqs held-out sequences of --ar-len tokens, the loss of one
teacher-forced pass next to the loss computed token by token with growing prefixes
(FLAMIA.md test 7): a causally safe model agrees to float tolerance, a leaky one does not.
The token-by-token side recomputes every prefix (about ar_len²/2 token-forwards per
sequence), so keep --ar-len short. Runs on the CPU in fp32 (quantized attention specs use
the PyTorch reference path there) or on CUDA with --device cuda.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

from flamia_train import data
from flamia_train.context_eval import load_model, loss_by_position, parallel_vs_autoregressive
from flamia_train.errors import FlamiaError


def _args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("checkpoint", help="run_dir/checkpoints/step_N directory or an exported .safetensors file")
    p.add_argument("--model", default="", help="model shape name (needed for a .safetensors without its run_dir)")
    p.add_argument("--data-path", default="data/stdlib", help="prepared corpus (data.path of the run)")
    p.add_argument("--tokenizer", default="", help="sentencepiece model (default: DATA_PATH/tokenizer.model)")
    p.add_argument("--source", default="stdlib", help="data.source of the corpus: stdlib | files | disk")
    p.add_argument("--split", default="heldout", help="split to evaluate on")
    p.add_argument("--seq-len", type=int, default=512, help="row length for the position buckets")
    p.add_argument("--batches", type=int, default=4, help="held-out batches of --micro-batch rows")
    p.add_argument("--micro-batch", type=int, default=4, help="rows per batch")
    p.add_argument("--ar-seqs", type=int, default=2, help="sequences for the parallel-vs-AR gap (0 = skip)")
    p.add_argument("--ar-len", type=int, default=256, help="tokens per AR sequence (a multiple of the block)")
    p.add_argument("--attention", default="", help="attention spec for every layer (default: bf16)")
    p.add_argument("--device", default="cpu", help="cpu | cuda")
    p.add_argument("--out", default="", help="also write the results as JSON here")
    return p.parse_args(argv)


def _loader(args, seq_len: int, micro_batch: int):
    cfg = data.DataConfig(source=args.source, path=args.data_path,
                          tokenizer=args.tokenizer or f"{args.data_path}/tokenizer.model")
    return data.build_loader(cfg, data.build_tokenizer(cfg), args.split, seq_len, micro_batch, 0, 1)


def evaluate(args) -> dict:
    from flamia_kernels import SEQ_BLOCK

    device = torch.device(args.device)
    model = load_model(args.checkpoint, args.model).to(device)
    if args.attention:
        model.set_attention_specs([args.attention] * len(model.layers))
    loader = _loader(args, args.seq_len, args.micro_batch)
    batches = [tuple(t.to(device) for t in loader.next_batch()) for _ in range(args.batches)]
    result = {"checkpoint": str(args.checkpoint), "seq_len": args.seq_len, "rows": args.batches * args.micro_batch,
              "buckets": loss_by_position(model, batches, args.seq_len), "ar": []}
    if args.ar_seqs:
        ar_loader = _loader(args, args.ar_len, 1)
        for _ in range(args.ar_seqs):
            inputs, targets = ar_loader.next_batch()
            row = torch.cat([inputs[0], targets[0, -1:]]).to(device)
            result["ar"].append(parallel_vs_autoregressive(model, row, SEQ_BLOCK))
    return result


def report(result: dict) -> str:
    lines = [f"held-out loss by position ({result['rows']} rows of {result['seq_len']} tokens):"]
    lines += [f"  positions [{b['start']}, {b['end']}): loss {b['loss']:.4f}" for b in result["buckets"]]
    for i, r in enumerate(result["ar"]):
        lines.append(f"sequence {i}: parallel_loss {r['parallel_loss']:.6f} autoregressive_loss "
                     f"{r['autoregressive_loss']:.6f} gap {r['gap']:.3e} max_token_gap {r['max_token_gap']:.3e}")
    if result["ar"]:
        gaps = [r["max_token_gap"] for r in result["ar"]]
        lines.append(f"parallel-vs-autoregressive: max per-token gap {max(gaps):.3e} over {len(gaps)} sequence(s)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = _args(argv)
    try:
        result = evaluate(args)
    except FlamiaError as err:
        print(f"eval_context: error: {err}", file=sys.stderr)
        return 2
    print(report(result), flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
