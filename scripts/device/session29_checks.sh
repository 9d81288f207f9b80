#!/usr/bin/env bash
# Session 29, call 2: dq_from_ds's launches (TMA, two query blocks a program: PAIRS) timed over both dS buffers with
# their dQ bits; where a PAIRS launch beats the default over the bf16 buffer (the fp8 preset's) by 3% or more, the 8k /
# 16k fwd+bwd table under it; then the GPU checks call 1's time box cut off — the fp8 dS buffer against the reference
# at fp8-dsk's default launch, the causal prefix tests of fp8-dsk and of the Gluon backward over the fp8 buffer.
#   bash scripts/device/session29_checks.sh
set -uo pipefail
source scripts/device/setup.sh
card=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$card"
TAIL=30 phase probe 80 python3 scripts/device/dq_from_ds_probe.py --rounds 3 --buffers bf16 --variants 2,4
pick=$(python3 - "$R/probe.log" <<'PY'
import re, sys
rows = re.findall(r"bf16 dq_from_ds (\S+)( pairs)? (\d+) warps × (\d+) stages: ([\d.]+) ms", open(sys.argv[1]).read())
base = [float(r[4]) for r in rows if r[0] == "loads" and not r[1] and (r[2], r[3]) == ("8", "3")]
pairs = sorted((float(r[4]), r[2], r[3]) for r in rows if r[1])
if base and pairs and pairs[0][0] <= 0.97 * base[0]:
    print(f"dq_from_ds.PAIRS=True dq_from_ds.WARPS={pairs[0][1]} dq_from_ds.STAGES={pairs[0][2]}")
PY
)
echo "pick: ${pick:-none}"
if [[ -n "$pick" ]]; then
  TAIL=20 phase table 110 python3 scripts/device/with_constants.py $pick -- scripts/bench_attention.py \
    --seqs 8192,16384 --dims 128 --presets fp8 --peers cudnn --modes fwdbwd --rounds 3 --out /tmp/results/bench
  TAIL=6 phase tests_pairs 60 python3 scripts/device/with_constants.py $pick -- $GPU_TESTS_ARGS \
    tests/test_attention_gpu.py -k "ds_out_matches_the_dq_kernel"
fi
TAIL=0 phase tests 100 python3 -m pytest -v -m gpu -s -p no:cacheprovider --tb=short tests/test_attention_gpu.py \
  tests/test_causal_safety.py -k "fp8_ds_out or (prefix and fp8-dsk) or (gluon_backward and fp8)"
grep -E "PASSED|FAILED|ERROR" "$R/tests.log" | sed -E 's/ (PASSED|FAILED|ERROR).*/ \1/' | tail -40
grep -E "^(FAILED|ERROR)|passed|failed" "$R/tests.log" | tail -10
tar -czf "$OUT/results.tar.gz" -C /tmp results
