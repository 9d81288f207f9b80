#!/usr/bin/env bash
# Session 16: the FP8 dV product with document masking on the H200 (τ per document) — the doc-mask GPU tests.
#   bash scripts/device/session16_docs.sh   (carry .gpu)
set -uo pipefail
source scripts/device/setup.sh
TAIL=8 phase tests_docmask 200 $GPU_TESTS tests/test_attention_docmask.py
tar -czf "$OUT/results.tar.gz" -C /tmp results
