#!/usr/bin/env bash
# Session 23: the floor each Gluon kernel's tiling sets — the forward, dK/dV and dQ kernels with their off-diagonal
# elementwise work removed (scripts/device/floor_probe.py: products, TMA ring, waits and stores kept, values garbage)
# beside the real kernels, S = 8k, B×H = 64, D = 128, the dQ kernel on the caller's stream (each kernel alone). Then the
# launch variants' floors: the warp-specialized forward (pipe 4, with and without ping-pong), the dQ kernel on 64-key
# sub-tiles, the dK/dV kernel on 64-query sub-tiles (it spills there).
#   bash scripts/device/session23_floor.sh
set -uo pipefail
source scripts/device/setup.sh
python3 scripts/device/floor_probe.py /tmp/probe && python3 scripts/device/floor_probe.py /tmp/probe64 --sub 64 || exit 1
P32=$(kernels_at probe /tmp/probe/kernels)
P64=$(kernels_at probe64 /tmp/probe64/kernels)
echo '{"bwd": {"dq_stream": null}}' > /tmp/ws.json
echo '{"fwd": {"pipe": 4}, "bwd": {"dq_stream": null, "gluon_dq": 64}}' > /tmp/a.json
echo '{"fwd": {"pipe": 4, "pingpong": true}, "bwd": {"dq_stream": null}}' > /tmp/b.json
echo '{"bwd": {"dq_stream": null, "sub": 64}}' > /tmp/c.json
# each launch's real kernels, then its probe's (logs real_NAME, floor_NAME): the default twice, then a and b
for name in 1:ws 2:ws a:a b:b; do
  TAIL=1 phase "real_${name%%:*}" 60 python3 scripts/launch_gaps.py --seq 8192 --launch "/tmp/${name#*:}.json"
  TAIL=1 phase "floor_${name%%:*}" 60 env PYTHONPATH="$P32" python3 scripts/launch_gaps.py --seq 8192 \
    --launch "/tmp/${name#*:}.json"
done
TAIL=1 phase floor64_c 60 env PYTHONPATH="$P64" python3 scripts/launch_gaps.py --seq 8192 --launch /tmp/c.json
for f in "$R"/*.log; do echo "== $(basename "$f")"; grep -E "_fwd_(gluon|ws)|_dkdv_|_dq_gluon|cudnn" "$f" | tail -4 | tr -s ' ' | cut -c1-90; done
tar -czf "$OUT/results.tar.gz" -C /tmp results
