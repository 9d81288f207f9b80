"""scripts/bench_attention.py's interleaved rounds: every implementation timed once per round, the rows keeping
the median round and the rounds' range, the × cuDNN ratio taken between medians (CPU: a fake clock)."""
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
from bench_attention import alternating_readings, interleaved_readings, markdown  # noqa: E402

META = dict(command="python scripts/bench_attention.py", commit="abc1234", date="2026-12-01", gpu="H200",
            torch="2.11", triton="3.6.0")


def test_rounds_interleave_every_implementation_and_keep_going_past_a_failure():
    calls, clock = [], iter([1.0, 2.0, 3.0, 4.0, 5.0, 6.0])

    def measure(fn, launch, mode):
        calls.append((fn, mode))
        if fn == "broken":
            raise RuntimeError("no such backend")
        return next(clock)

    entries = [("fp8", "ours", None), ("flex (bf16 peer)", "broken", None), ("cudnn (bf16 peer)", "peer", None)]
    got = interleaved_readings(entries, ["fwd"], 3, measure)
    # round after round, each implementation once per round (not three readings of one, then the next)
    assert calls == [("ours", "fwd"), ("broken", "fwd"), ("peer", "fwd")] * 3
    assert got[("fp8", "fwd")] == [1.0, 3.0, 5.0] and got[("cudnn (bf16 peer)", "fwd")] == [2.0, 4.0, 6.0]
    assert all(math.isnan(x) for x in got[("flex (bf16 peer)", "fwd")])


def test_table_keeps_the_median_round_its_range_and_the_ratio_of_medians():
    row = dict(kind="speed", mode="fwd", B=4, H=16, S=8192, D=128, emulated=False)
    rows = [dict(row, name="fp8", ms=1.6, tflops=100.0, ms_rounds=[1.6, 1.5, 1.9]),
            dict(row, name="cudnn (bf16 peer)", ms=2.0, tflops=80.0, ms_rounds=[2.0, 2.1, 1.8])]
    table = markdown(rows, META)
    assert "| ms | rounds' range, ms | TFLOP/s | × cuDNN |" in table
    assert "| fp8 | fwd | 1.600 | 1.500–1.900 (3) | 100.0 | 1.25 |" in table
    assert "| cudnn (bf16 peer) | fwd | 2.000 | 1.800–2.100 (3) | 80.0 | 1.00 |" in table


def test_alternating_calls_rotate_the_order_flush_before_each_and_drop_a_failing_entry():
    """--timing alternating: each call of one implementation sits between calls of the others (the order
    rotated call by call, so none always follows the flush's tail or another's heat), every call after a
    flush, each timed alone; a peer that fails its warm-up reads NaN and takes no further calls."""
    events, clock = [], iter(range(1, 100))

    def run(fn, launch, mode):
        events.append((fn, mode))
        if fn == "broken":
            raise RuntimeError("no such backend")

    def stamp(thunk):
        thunk()
        ms = float(next(clock))
        return lambda: ms

    failures = []
    entries = [("fp8", "ours", None), ("flex (bf16 peer)", "broken", None), ("cudnn (bf16 peer)", "peer", None)]
    got = alternating_readings(entries, ["fwd"], 3, run, stamp, flush=lambda: events.append("flush"),
                               log=lambda name, mode, err: failures.append(name))
    warm = [("ours", "fwd"), ("broken", "fwd"), ("peer", "fwd")]
    timed = ["flush", ("ours", "fwd"), "flush", ("peer", "fwd"),  # call 0: in order
             "flush", ("peer", "fwd"), "flush", ("ours", "fwd"),  # call 1: rotated by one
             "flush", ("ours", "fwd"), "flush", ("peer", "fwd")]
    assert events == warm + timed and failures == ["flex (bf16 peer)"]
    assert got[("fp8", "fwd")] == [1.0, 4.0, 5.0] and got[("cudnn (bf16 peer)", "fwd")] == [2.0, 3.0, 6.0]
    assert all(math.isnan(x) for x in got[("flex (bf16 peer)", "fwd")])


def test_one_call_gives_each_backward_fresh_gradients():
    """A timed fwd+bwd call drops its leaves' gradients first, so that no accumulation kernel (an addition of Q's,
    K's and V's size) is timed with it; without leaves the gradients add up, as autograd does."""
    import torch
    from bench_attention import one_call

    q, k = torch.randn(4, 8), torch.randn(4, 8)
    q.requires_grad_(True)
    k.requires_grad_(True)
    do = torch.randn(4, 8)
    for _ in range(3):
        one_call(lambda: q * k, do, "fwdbwd", (q, k))
    assert torch.equal(q.grad, do * k) and torch.equal(k.grad, do * q)
    one_call(lambda: q * k, do, "fwdbwd")
    assert torch.allclose(q.grad, 2 * do * k)
