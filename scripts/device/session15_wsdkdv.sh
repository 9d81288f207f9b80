#!/usr/bin/env bash
# Session 15: the warp-specialized dK/dV kernel (attention_dkdv_ws, launch option ws_dkdv): its GPU tests (dK, dV
# bit-identical to the Gluon dK/dV kernel; the Gluon kernel against the Triton one), its kernel time against the
# default's in a training step (torch.profiler, interleaved), then fwd + bwd against cuDNN with and without it
# (bench_attention's alternating calls).
#   bash scripts/device/session15_wsdkdv.sh   (carry .gpu)
set -uo pipefail
source scripts/device/setup.sh
echo '{"bwd": {"ws_dkdv": true}}' > /tmp/wsdkdv.json
TAIL=14 phase tests 240 $GPU_TESTS tests/test_attention_gpu.py -k "ws_dkdv or gluon_dkdv"
for round in 1 2; do
  TAIL=1 phase "gaps_base_$round" 90 python3 scripts/launch_gaps.py --seq 8192
  TAIL=1 phase "gaps_ws_$round" 90 python3 scripts/launch_gaps.py --seq 8192 --launch /tmp/wsdkdv.json
done
for f in "$R"/gaps_*.log; do echo "== $(basename "$f")"; grep -E "dkdv|per call" "$f"; done
TAIL=12 phase bench 300 python3 scripts/bench_attention.py --seqs 8192,16384 --dims 128 --presets fp8 --peers cudnn \
  --modes fwdbwd --rounds 3 --launch /tmp/wsdkdv.json --out "$R"
tar -czf "$OUT/results.tar.gz" -C /tmp results
