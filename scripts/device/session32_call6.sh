#!/usr/bin/env bash
# Session 32, call 6 (one call, ~2 minutes): call 5's dq_from_ds sweep again, three rounds — over the fp8 buffer 8
# warps × 3 (the default) / 4 / 5 / 6 stages and 4 × 4, over the bf16 buffer 8 × 4 and 4 × 4 against its 8 × 3.
#   bash scripts/device/session32_call6.sh            (carry .gpu)
set -uo pipefail
source scripts/device/setup.sh  # also save() and the card's name
TAIL=40 phase probe_fp8 150 python3 scripts/device/dq_from_ds_probe.py --rounds 3 --buffers fp8 --variants 7,8,12,9
TAIL=40 phase probe_bf16 150 python3 scripts/device/dq_from_ds_probe.py --rounds 3 --buffers bf16 --variants 7,9
save
