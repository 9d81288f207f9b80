#!/usr/bin/env bash
# Session 19, first call: the causal prefix tests' GPU tier and the isolated-call probe at this commit (session 18's
# open checks), then the forward's exponentials on the FMA pipes as a timing probe (scripts/exp_fma_probe.py).
#   bash scripts/device/session19_first.sh   (carry .gpu)
set -uo pipefail
source scripts/device/setup.sh
TAIL=15 phase causal_gpu 170 $GPU_TESTS tests/test_causal_safety.py
TAIL=8 phase gluon_fwd_gpu 100 $GPU_TESTS tests/test_attention_gpu.py -k "gluon_forward or fused_q or relaunch"
TAIL=40 phase exp_fma 210 python3 scripts/exp_fma_probe.py --seqs 8192 16384 --rounds 3 --calls 16
TAIL=30 phase host 95 python3 scripts/host_overhead_probe.py --seqs 8192 16384 --calls 16
tar -czf "$OUT/results.tar.gz" -C /tmp results
