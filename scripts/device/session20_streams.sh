#!/usr/bin/env bash
# Session 20: the dQ kernel on a side stream beside the dK/dV kernel (launch option dq_stream): bit-identity, then
# fwd+bwd timing at 8k and 16k of the default ("high" since 526b022) against one stream and the same priority, with
# cuDNN; Nsight Compute's stall samples of the chained forward per SASS line. (Run at e1c8df3, whose default was one
# stream, with launch files of "same" and "high": docs/benchmarks.md, session 20.)
#   bash scripts/device/session20_streams.sh   (carry .gpu)
set -uo pipefail
source scripts/device/setup.sh
TAIL=6 phase tests 150 $GPU_TESTS tests/test_attention_gpu.py -k "side_stream"
echo '{"bwd": {"dq_stream": null}}' > /tmp/serial.json
echo '{"bwd": {"dq_stream": "same"}}' > /tmp/same.json
for p in serial same; do
  TAIL=10 phase "table_$p" 200 python3 scripts/bench_attention.py --seqs 8192,16384 --dims 128 --presets fp8 \
    --peers cudnn --modes fwdbwd --rounds 3 --launch "/tmp/$p.json" --out "$R/table_$p"
done
# the chained forward's stall samples per SASS line at 8k (where a tile's ~1,200 SM cycles go)
TAIL=2 phase ncu 150 ncu --clock-control none --kernel-name _fwd_gluon_kernel --launch-skip 1 --launch-count 1 \
  --section WarpStateStats --section SourceCounters -o "$R/fwd" python3 scripts/profile_attention_step.py --seq 8192 \
  --batch-heads 4x16
TAIL=1 phase sass 120 ncu -i "$R/fwd.ncu-rep" --page source --csv --print-source sass
TAIL=40 phase stats 60 ncu -i "$R/fwd.ncu-rep" --page details --section WarpStateStats
gzip "$R/sass.log"; rm -f "$R/fwd.ncu-rep"
tar -czf "$OUT/results.tar.gz" -C /tmp results
