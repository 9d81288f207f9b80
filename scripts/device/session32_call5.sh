#!/usr/bin/env bash
# Session 32, call 5 (one call, ~3 minutes): dq_from_ds over the fp8 dS buffer (the `fp8` preset's dQ product) at
# other warps and ring stages (scripts/device/dq_from_ds_probe.py variants 7-11, ONE_LOOP), against the default launch
# (8 warps × 3 stages) and the buffer's read ceiling; dQ compared bit for bit; two rounds in turn.
#   bash scripts/device/session32_call5.sh            (carry .gpu)
set -uo pipefail
source scripts/device/setup.sh  # also save() and the card's name
TAIL=40 phase probe 200 python3 scripts/device/dq_from_ds_probe.py --rounds 2 --buffers fp8 --variants 7,8,9,10,11
save
