#!/usr/bin/env bash
# The next session's first device call (1× H200, ~480 s): what session 5 changed or could not run.
#   1. the whole GPU tier of the attention kernels under the new half-tile defaults (session 5 ran the
#      fp8 D=128 causal tests, the doc-masked ones and the swept variants; not yet: D=64, non-causal at
#      scale, the emulated presets' atomic / BPTR / bn options on top of the new bases), the pre-pass
#      launch overrides' bytes, and the per-token fp8 pre-pass kernels against `formats` at scale (their
#      row arithmetic moved into one helper, _fp8_row_codes, in 81dd11b);
#   2. the forward pre-pass part by part with warp variants (scripts/bench_prepass.py, never run), and the
#      speed table with the fuse_q launch option (the forward kernel quantizes Q itself) beside the default;
#   3. gpt-1b at 8k: bf16, fp8, fp8 + torch.compile (Dynamo's graph break at P's NVFP4 global is
#      gone since 1f8d8cd) and the revised flamia recipe, 6 measured steps, recorded.
#   FLAMIA_COMMIT=<sha> bash scripts/device/next_session.sh
set -uo pipefail
source scripts/device/setup.sh
find "$R" -mindepth 1 -delete
export FLAMIA_COMMIT=${FLAMIA_COMMIT:-$(cat .gpu/COMMIT 2>/dev/null || echo unknown)}
T="python3 -m pytest -q -m gpu -s -p no:cacheprovider --tb=short"
TAIL=40 phase tests 200 $T tests/test_attention_gpu.py tests/test_causal_safety.py tests/test_attention_docmask.py \
  tests/test_quantize.py -k "not test_gpu_triton_matches_formats_at_scale or fp8_token or fp8_key_side"
TAIL=14 phase prepass 30 python3 scripts/bench_prepass.py
echo '{"fwd": {"fuse_q": true}}' > "$R/fuse_q.json"
TAIL=20 phase fuse_q 60 python3 scripts/bench_attention.py --seqs 8192,16384 --dims 128 --presets fp8 --peers cudnn \
  --launch "$R/fuse_q.json" --out "$R/fuse_q"
tar -czf "$OUT/kernels.tar.gz" -C /tmp results
TAIL=12 phase bench_train 200 python3 scripts/bench_train.py --model gpt-1b --recipes bf16 fp8 \
  "fp8-compile:fp8 parallel.compile=true" flamia --contexts 8k --warmup 3 --steps 6 --profile-steps 1 \
  --tokens-per-step 16384 --micro-tokens 8192 --out "$R/bench_train" --record
cp docs/bench_train.json "$R/bench_train_recorded.json"
tar -czf "$OUT/results.tar.gz" -C /tmp results
