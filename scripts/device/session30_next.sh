#!/usr/bin/env bash
# The next device call after session 29 (one call, ~9 minutes): what session 29 built for the fp8 preset's fwd+bwd at
# 8k (~0.23 ms short of cuDNN's on the H200) and could not run.
#   1. dq_from_ds.PAIRS (two query blocks a program) against the default over the bf16 buffer, dQ bits compared;
#   2. launch option ds_chunks (each chunk's dq_from_ds on a side stream beside the next chunk's dK/dV kernel): the
#      8k / 16k fwd+bwd table with {"bwd": {"ds_chunks": 4}} as "[launch]" rows beside the defaults and cuDNN, the
#      same run; and, where PAIRS saved 3% or more, the same table under it;
#   3. the GPU tests: ds_chunks' bits, the fp8 dS buffer against the reference, the prefix tests of fp8-dsk and of the
#      Gluon backward over the fp8 buffer.
#   bash scripts/device/session30_next.sh
set -uo pipefail
source scripts/device/setup.sh
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
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
echo '{"bwd": {"ds_chunks": 4}}' > /tmp/chunks.json
TAIL=24 phase table_chunks 150 python3 scripts/bench_attention.py --seqs 8192,16384 --dims 128 --presets "fp8;fp8-dsk" \
  --peers cudnn --modes fwdbwd --rounds 3 --launch /tmp/chunks.json --out /tmp/results/chunks
if [[ -n "$pick" ]]; then
  TAIL=16 phase table_pairs 110 python3 scripts/device/with_constants.py $pick -- scripts/bench_attention.py \
    --seqs 8192,16384 --dims 128 --presets fp8 --peers cudnn --modes fwdbwd --rounds 3 --launch /tmp/chunks.json \
    --out /tmp/results/pairs
fi
TAIL=0 phase tests 200 python3 -m pytest -v -m gpu -s -p no:cacheprovider --tb=short tests/test_attention_gpu.py \
  tests/test_causal_safety.py -k "ds_chunks or fp8_ds_out or (prefix and fp8-dsk) or (gluon_backward and fp8)"
grep -E "PASSED|FAILED|ERROR" "$R/tests.log" | sed -E 's/ (PASSED|FAILED|ERROR).*/ \1/' | tail -40
grep -E "^(FAILED|ERROR)|passed|failed" "$R/tests.log" | tail -10
tar -czf "$OUT/results.tar.gz" -C /tmp results
