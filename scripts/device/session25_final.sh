#!/usr/bin/env bash
# Session 25, last call: the GPU tiers at the final kernels (causal safety, ds_out's bits, dQ from K's bytes), the
# dQ-from-dS kernel on K's bytes (K_BYTES) against the bf16 copies, then the speed table — the default (ds_out on),
# ds_out off, and dq_from_ds on K's bytes, bench calls in turn — and fwd+bwd at 32k.
#   bash scripts/device/session25_final.sh      # at 724cb61 (K_BYTES was dropped after it)
set -uo pipefail
source scripts/device/setup.sh
card=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$card"
WC="python3 scripts/device/with_constants.py"
TAIL=6 phase safety 300 $GPU_TESTS tests/test_causal_safety.py tests/test_attention_gpu.py -k "prefix or leak or safe or ds_out"
TAIL=5 phase tests_kbytes 120 $WC dq_from_ds.K_BYTES=True -- $GPU_TESTS_ARGS tests/test_attention_gpu.py -k ds_out
TAIL=5 phase probe 120 python3 scripts/device/dq_from_ds_probe.py
echo '{"bwd": {"ds_out": 0}}' > /tmp/off.json
for round in 1 2; do
  TAIL=10 phase "table_$round" 150 python3 scripts/bench_attention.py --seqs 8192,16384 --dims 128 --presets fp8 \
    --peers cudnn --rounds 3 --launch /tmp/off.json --out "/tmp/results/bench_$round"
  TAIL=5 phase "table_kbytes_$round" 150 $WC dq_from_ds.K_BYTES=True -- scripts/bench_attention.py --seqs 8192,16384 \
    --dims 128 --presets fp8 --peers cudnn --modes fwdbwd --rounds 3 --out "/tmp/results/bench_kbytes_$round"
done
TAIL=6 phase table_32k 200 python3 scripts/bench_attention.py --seqs 32768 --dims 128 --presets fp8 \
  --peers cudnn --modes fwdbwd --rounds 3 --launch /tmp/off.json --out /tmp/results/bench_32k
tar -czf "$OUT/results.tar.gz" -C /tmp results
