#!/usr/bin/env bash
# Session 11: the forward's timing spread, call by call (CUDA graphs, flushed), with the GPU's SM clock, power
# and clock-event reasons sampled every 20 ms alongside (nvidia-smi).
set -uo pipefail
source scripts/device/setup.sh
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_event_reasons.active \
  --format=csv -lms 20 > "$R/smi.csv" 2>&1 &
SMI=$!
TAIL=30 phase probe 300 python3 scripts/fwd_timing_probe.py --seq 8192 --rounds 2 --series
kill $SMI
python3 - "$R/smi.csv" <<'PY'
import collections, sys
rows = [r.split(", ") for r in open(sys.argv[1]).read().splitlines()[1:] if r.count(",") >= 5]
clk = collections.Counter(r[1] for r in rows); why = collections.Counter(r[5] for r in rows)
pw = [float(r[3].split()[0]) for r in rows if r[3].split()[0].replace(".", "").isdigit()]
print("samples", len(rows), "sm clocks", clk.most_common(8)); print("reasons", why.most_common(6))
print("power W min/median/max", min(pw), sorted(pw)[len(pw) // 2], max(pw))
PY
tar -czf "$OUT/results.tar.gz" -C /tmp results
