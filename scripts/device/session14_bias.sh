#!/usr/bin/env bash
# Session 14, last call: the warp-specialized forward's GPU tests at this commit and its time against the default
# (interleaved), then the same with the diagonal tile's mask written as a bias, `s + where(keep, 0, -inf)` — the one
# form found on the CPU with which ptxas does not serialize the kernel's wgmma (C7511). An experiment on the device's
# copy only: the bias form turns a future key's +inf score into NaN (a causal leak), so it is not committed.
#   bash scripts/device/session14_bias.sh   (carry .gpu)
set -uo pipefail
source scripts/device/setup.sh
TAIL=6 phase tests_ws 300 $GPU_TESTS tests/test_attention_gpu.py -k "ws_forward"
TAIL=8 phase ab 200 python3 scripts/ab_forward.py --seqs 8192 16384 --variants default ws --rounds 3
cp kernels/attention_fwd_ws.py /tmp/ws_committed.py
sed -i 's/        s = gl.where(keep, s, float("-inf"))/        s = s + gl.where(keep, 0.0, float("-inf"))/' \
  kernels/attention_fwd_ws.py
grep -c 'gl.where(keep, 0.0, float("-inf"))' kernels/attention_fwd_ws.py
TAIL=8 phase ab_bias 200 python3 scripts/ab_forward.py --seqs 8192 16384 --variants default ws --rounds 3
cp /tmp/ws_committed.py kernels/attention_fwd_ws.py
tar -czf "$OUT/results.tar.gz" -C /tmp results
