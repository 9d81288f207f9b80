"""Time `dq_from_ds` (launch option ds_out's dQ product) alone at S = 8k, B×H = 64 for a few launches of its Triton
kernel — the thread loads or TMA (`dq_from_ds.TMA`), two query blocks a program (`dq_from_ds.PAIRS`), warps and ring
stages — over a bf16 and an fp8 dS buffer, against what the card's DRAM moves (a plain copy of the same buffer) and
against a reduction that only reads it (the read ceiling), so its distance from the bandwidth bound is a measured
figure. Every variant's dQ is compared bit for bit with the default launch's (the options change how the tiles reach
shared memory, never the sums). Random values in the buffer: the kernel's time does not depend on them. Variants run
in turn for --rounds rounds (a drift of the clocks touches all alike); the median call of each round.
    python scripts/device/dq_from_ds_probe.py [--rounds 3] [--seq 8192]"""
from __future__ import annotations

import argparse
import statistics

import torch
from flamia_kernels import attention_bwd_gluon, dq_from_ds

# (TMA, PAIRS, num_warps, num_stages, K_ONCE, ONE_LOOP); the first is session 31's launch (8 warps × 3 stages; the
# module's own stages by buffer since session 32: `dq_from_ds.STAGES`), every other's dQ is compared with its except
# K_ONCE's (`dq_from_ds.K_ONCE`: the buffer read alone, K's tile read once a program; other sums)
# (ONE_LOOP the default since session 31: variant 6 is the two loops it replaced; 7-12 its warps and ring stages,
# session 32's question for the fp8 buffer, read at ~80% of the buffer's read ceiling)
VARIANTS = [(False, False, 8, 3, False, True), (True, False, 8, 4, False, False), (False, True, 8, 2, False, False),
            (False, True, 8, 3, False, False), (False, True, 16, 2, False, False), (False, False, 8, 3, True, False),
            (False, False, 8, 3, False, False), (False, False, 8, 4, False, True), (False, False, 8, 5, False, True),
            (False, False, 4, 4, False, True), (False, False, 16, 3, False, True), (False, False, 4, 6, False, True),
            (False, False, 8, 6, False, True)]


_DEFAULT_STAGES = dict(dq_from_ds.STAGES)


def _ms(fn, reps: int = 7) -> float:
    """Median of `reps` timed calls (CUDA events), after one warm-up call."""
    fn()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return sorted(times)[len(times) // 2]


def _inputs(b: int, h: int, seq: int, d: int, fp8: bool):
    """A random dS buffer and K's operands for it: bf16 copies [B, H, S, D], or for fp8 the bytes K-major
    [B, H, D, S] with ρ per query."""
    buf = attention_bwd_gluon.ds_buffer(b, h, seq, "cuda", fp8=fp8)
    if fp8:
        buf.view(torch.uint8).copy_(torch.randint(0, 0x7E, buf.shape, dtype=torch.uint8, device="cuda"))
        kbf, kbbf = ((torch.randn(b, h, d, seq, device="cuda") * 40).to(torch.float8_e4m3fn) for _ in range(2))
        rho = torch.exp2(torch.randint(-4, 4, (b, h, seq), device="cuda").float())
        return buf, kbf, kbbf, rho
    buf.normal_()
    kbf, kbbf = (torch.randn(b, h, seq, d, device="cuda").to(torch.bfloat16) for _ in range(2))
    return buf, kbf, kbbf, None


def _launch(variant):
    tma, pairs, warps, stages, k_once, one_loop = variant
    dq_from_ds.TMA, dq_from_ds.PAIRS, dq_from_ds.WARPS, dq_from_ds.K_ONCE, dq_from_ds.ONE_LOOP = (tma, pairs, warps,
                                                                                                  k_once, one_loop)
    dq_from_ds.STAGES = {"fp8": stages, "bf16": stages}  # the variant's stages over either buffer


def _name(variant) -> str:
    tma, pairs, warps, stages, k_once, one_loop = variant
    return (f"{'tma' if tma else 'loads'}{' pairs' if pairs else ''}{' one loop' if one_loop else ''} {warps} warps × "
            f"{stages} stages" + (" K once (probe)" if k_once else ""))


def _probe_buffer(fp8: bool, variants: list, rounds: int, seq: int) -> None:
    """One dS buffer: its copy rate, each variant's dQ against the default launch's bits, then the variants' times
    in turn for `rounds` rounds."""
    b, h, d = 32768 // seq, 16, 128
    buf, kbf, kbbf, rho = _inputs(b, h, seq, d, fp8)
    gb = buf.numel() * buf.element_size() / 1e9
    dst = torch.empty_like(buf)
    ms = _ms(lambda: dst.copy_(buf))
    kind = "fp8" if fp8 else "bf16"
    print(f"{torch.cuda.get_device_name()}: {kind} dS buffer {gb:.2f} GB at S = {seq}; a copy of it {ms:.3f} ms "
          f"({2 * gb / ms:.2f} TB/s read + write)", flush=True)
    dst = None  # its memory back before the kernel runs
    # the read ceiling: torch's sum reads the buffer once and writes one number (session 30's question: how far below
    # what the card can read is dq_from_ds, when K's L2 reads cost it only 3%)
    ms = _ms(lambda: buf.view(torch.float32).sum())
    print(f"  {kind} buffer read alone (torch sum): {ms:.3f} ms ({gb / ms:.2f} TB/s)", flush=True)

    def call():
        return dq_from_ds.dq_from_ds(buf, kbf, kbbf, b, h, seq, 0.1, rho=rho)

    _launch(variants[0])
    want = call()
    variants = list(variants)
    for variant in list(variants[1:]):
        if variant[4]:
            continue  # K_ONCE: other sums by design
        _launch(variant)
        try:
            got = call()
        except Exception as err:  # e.g. more shared memory than an SM has: reported and left out of the timing
            print(f"  {kind} {_name(variant)}: failed to launch: {err!s:.160}", flush=True)
            variants.remove(variant)
            continue
        same = torch.equal(got.view(torch.int16), want.view(torch.int16))
        print(f"  {kind} {_name(variant)}: dQ bit-identical to the default: {same}"
              + ("" if same else f" (max |diff| {(got.float() - want.float()).abs().max().item():.3g})"),
              flush=True)
    times: dict = {v: [] for v in variants}
    for _ in range(rounds):
        for variant in variants:
            _launch(variant)
            times[variant].append(_ms(call))
    for variant, ms in times.items():
        med = statistics.median(ms)
        print(f"  {kind} dq_from_ds {_name(variant)}: {med:.3f} ms "
              f"(rounds {', '.join(f'{m:.3f}' for m in ms)}; {gb / med:.2f} TB/s of dS)", flush=True)
    _launch(VARIANTS[0])
    dq_from_ds.STAGES = dict(_DEFAULT_STAGES)  # the module's own launch again


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seq", type=int, default=8192)
    ap.add_argument("--buffers", default="bf16,fp8", help="which dS buffers, comma-separated: bf16, fp8")
    ap.add_argument("--variants", default=None,
                    help="indices into VARIANTS to run, comma-separated (0, the default launch, always runs)")
    args = ap.parse_args()
    variants = VARIANTS if args.variants is None else [VARIANTS[0]] + [
        VARIANTS[int(i)] for i in args.variants.split(",") if int(i) != 0]
    for kind in args.buffers.split(","):
        _probe_buffer(kind == "fp8", variants, args.rounds, args.seq)
        torch.cuda.empty_cache()  # the buffer's memory back before the next one


if __name__ == "__main__":
    main()
