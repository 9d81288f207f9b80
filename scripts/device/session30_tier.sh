#!/usr/bin/env bash
# Session 30, call 5 (~7 minutes): the rest of the GPU tier under fold_k (the fast path's default since d383cb1): the
# attention GPU tests calls 3 and 4 did not select, document masking, the long-context model, τ's kernel.
#   bash scripts/device/session30_tier.sh
set -uo pipefail
source scripts/device/setup.sh
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
TAIL=0 phase tier 420 python3 -m pytest -v -m gpu -p no:cacheprovider --tb=short tests/test_attention_gpu.py \
  tests/test_attention_docmask.py tests/test_long_context_model.py tests/test_dv_row_scale.py \
  -k "not (matches_reference or prefix or ds_out or ds_chunks or accuracy or fold_k or deferred)"
grep -E "PASSED|FAILED|ERROR" "$R/tier.log" | sed -E 's/ (PASSED|FAILED|ERROR).*/ \1/' | tail -80
grep -E "^(FAILED|ERROR)|passed|failed" "$R/tier.log" | tail -10
tar -czf "$OUT/results.tar.gz" -C /tmp results
