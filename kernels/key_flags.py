"""Per-slice counters by which the sm_90 attention forward starts while its key-side pass still runs.

Why: the forward's first launch quantizes K and V (`quantize.quantize_fp8_key_sides`: per-token bytes,
Vᵀ, the token-block copies) and is memory-bound, 0.17 ms at S = 8k, B×H = 64 on the H200, while the
Gluon forward after it is bound by its own latencies (docs/kernels.md): run one after the other, the
pass is what stands between the forward kernel's 1.22× cuDNN and the call's 1.09×. With these flags
the two run side by side:

- the pass runs on a persistent grid (`KeyFlags.programs` programs, each resident from the start) that
  quantizes the slices (B·Hkv) in order and adds one to its slice's counter per finished item;
- the forward is launched as its *programmatic dependent* (sm_90's programmatic dependent launch): it
  may start as soon as every program of the pass has started, and each forward program waits for its
  K/V slice's counter to reach the slice's item count before it reads the slice;
- the forward's last program to finish waits for the whole pass (`griddepcontrol.wait`) and sets every
  counter back to zero, so the buffer is ready for the next call on the stream, CUDA graph replays
  included.

No program can wait for work that is not resident: the forward launches only once every pass program
runs, and those wait for nothing. Without the dependent launch (an older driver, say) the forward
starts after the pass and finds every count complete: the same bytes either way.

One buffer per (device, stream): calls on one stream run in order, so they share it; calls on two
streams never do. It is allocated outside graph capture only (a buffer from a graph's private pool
would die with the graph): a call captured before any buffer exists runs without the overlap.
"""
from __future__ import annotations

import torch

_BUFFERS: dict[tuple[int, int], torch.Tensor] = {}
_SMS: dict[int, int] = {}


class KeyFlags:
    """The counters of one forward: `counts` int32 [slices + 1] (one per K/V slice, then the forward's
    finished programs), `programs` the pass's persistent grid. `published` is set by the pass that
    writes them (`quantize.quantize_fp8_key_sides(flags=...)`); a forward waits on them only then."""

    def __init__(self, counts: torch.Tensor, slices: int, programs: int):
        self.counts = counts
        self.slices = slices
        self.programs = programs
        self.published = False

    def abandon(self) -> None:
        """The pass published counts no forward will consume (the forward took another kernel, or failed):
        zero them on the stream, after the pass, so the next call starts from zero."""
        if self.published:
            self.counts.zero_()
            self.published = False


def key_flags(device: torch.device, slices: int, programs: int | None = None) -> KeyFlags | None:
    """Counters for a forward over `slices` K/V slices on the current stream of `device`, or None where the
    overlap cannot run (graph capture before the first buffer exists). programs: the pass's grid, by
    default one program per SM."""
    stream = torch.cuda.current_stream(device)
    key = (device.index if device.index is not None else torch.cuda.current_device(), stream.cuda_stream)
    buf = _BUFFERS.get(key)
    if buf is None or buf.numel() < slices + 1:
        if torch.cuda.is_current_stream_capturing():
            return None
        # a larger buffer replaces a smaller one: the old one's last users are earlier on this stream, so the
        # allocator hands its memory out again only after them; the new one starts at zero
        buf = torch.zeros(max(slices + 1, 256), dtype=torch.int32, device=device)
        _BUFFERS[key] = buf
    if programs is None:
        if key[0] not in _SMS:
            _SMS[key[0]] = torch.cuda.get_device_properties(key[0]).multi_processor_count
        programs = _SMS[key[0]]
    if programs < 1:
        raise ValueError(f"key_programs={programs}: allowed a positive number of programs (or None: one per SM)")
    return KeyFlags(buf, slices, programs)
