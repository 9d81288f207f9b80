"""Time `dq_from_ds` (launch option ds_out's dQ product) alone at S = 8k, B×H = 64 for a few launches of its Triton
kernel, against what the card's DRAM moves (a plain copy of the same dS buffer), so its distance from the bandwidth
bound is a measured figure. Random bf16 in the buffer: the kernel's time does not depend on the values.
    python scripts/device/dq_from_ds_probe.py"""
from __future__ import annotations

import torch
from flamia_kernels import attention_bwd_gluon, dq_from_ds

VARIANTS = [(8, 3), (8, 2), (8, 4), (4, 3)]  # (num_warps, num_stages)


def _ms(fn, reps: int = 5) -> float:
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


def main() -> None:
    b, h, seq, d = 4, 16, 8192, 128
    buf = attention_bwd_gluon.ds_buffer(b, h, seq, "cuda").normal_()
    kbf, kbbf = (torch.randn(b, h, seq, d, device="cuda").to(torch.bfloat16) for _ in range(2))
    gb = buf.numel() * 2 / 1e9
    dst = torch.empty_like(buf)
    ms = _ms(lambda: dst.copy_(buf))
    print(f"{torch.cuda.get_device_name()}: dS buffer {gb:.2f} GB; a copy of it {ms:.3f} ms "
          f"({2 * gb / ms:.2f} TB/s read + write)", flush=True)
    dst = None  # its memory back before the kernel runs
    for warps, stages in VARIANTS:
        dq_from_ds.WARPS, dq_from_ds.STAGES = warps, stages
        ms = _ms(lambda: dq_from_ds.dq_from_ds(buf, kbf, kbbf, b, h, seq, 0.1))
        print(f"dq_from_ds {warps} warps × {stages} stages: {ms:.3f} ms ({gb / ms:.2f} TB/s of dS)", flush=True)


if __name__ == "__main__":
    main()
