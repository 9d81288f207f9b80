#!/usr/bin/env bash
# Session 9's confirming call at the landed kernels (those of 1e47dba: the dK/dV statistics by TMA; the
# scale prefetches and per-copy mbarrier rings of c4183a1 reverted): the GPU tiers, the speed table twice,
# one call's kernel timeline, the dK/dV kernel's warp stalls, and an A/B of the forward with its block
# scales loaded a tile ahead (.gpu/fwdpf/kernels: HEAD + 29dff5b) against HEAD, interleaved.
#   mkdir -p .gpu/fwdpf; git archive HEAD kernels | tar -x -C .gpu/fwdpf; git show 29dff5b -- kernels | (cd .gpu/fwdpf && patch -p1)
#   bash scripts/device/session9_final.sh
set -uo pipefail
source scripts/device/setup.sh
mkdir -p /tmp/pfpkgs && ln -sfn "$PWD/.gpu/fwdpf/kernels" /tmp/pfpkgs/flamia_kernels
PF=/tmp/site:/tmp/pfpkgs:$PWD
T=$GPU_TESTS
TAIL=30 phase bench1 150 python3 scripts/bench_attention.py --seqs 8192,16384,32768 --dims 128 --presets fp8 \
  --peers cudnn,flash,flex --out "$R/bench1"
for round in 1 2; do
  TAIL=14 phase "gaps_head_$round" 60 python3 scripts/launch_gaps.py --seq 8192
  TAIL=14 phase "gaps_fwdpf_$round" 60 env PYTHONPATH=$PF python3 scripts/launch_gaps.py --seq 8192
done
TAIL=40 phase ncu_dkdv 120 ncu --clock-control none --kernel-name 'regex:_dkdv_gluon_kernel' --launch-skip 1 \
  --launch-count 1 --section SpeedOfLight --section WarpStateStats --print-details all \
  python3 scripts/profile_attention_step.py --seq 8192 --batch-heads 4x16
TAIL=6 phase tests_quant 90 $T tests/test_quantize.py
TAIL=8 phase tests_attn 260 $T tests/test_attention_gpu.py
TAIL=6 phase tests_causal 90 $T tests/test_causal_safety.py -k gluon
TAIL=20 phase bench2 150 python3 scripts/bench_attention.py --seqs 8192,16384 --dims 128 --presets fp8 \
  --peers cudnn --out "$R/bench2"
tar -czf "$OUT/results.tar.gz" -C /tmp results
