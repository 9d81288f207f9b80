#!/usr/bin/env bash
# Launch flamia-train on one or many nodes through torchrun. Extra arguments are Hydra overrides.
#
#   single node, 8 GPUs:   scripts/launch.sh model=gpt-1b precision=fp8
#   multi-node (run on every node, same MASTER_ADDR/PORT, NODE_RANK 0..NNODES-1):
#     NNODES=4 NODE_RANK=$i MASTER_ADDR=node0 MASTER_PORT=29500 scripts/launch.sh model=gpt-1b
#
# NPROC_PER_NODE defaults to the number of visible GPUs (1 process on a CPU-only machine).
set -euo pipefail
NNODES=${NNODES:-1}
NODE_RANK=${NODE_RANK:-0}
MASTER_ADDR=${MASTER_ADDR:-127.0.0.1}
MASTER_PORT=${MASTER_PORT:-29500}
RDZV_ID=${RDZV_ID:-flamia}
if [ -z "${NPROC_PER_NODE:-}" ]; then
  NPROC_PER_NODE=$(python3 -c 'import torch; print(max(1, torch.cuda.device_count()))')
fi
# Never let NCCL use NVLink multicast on shared machines (see docs/distributed.md).
export NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0}
export TORCH_SYMM_MEM_DISABLE_MULTICAST=${TORCH_SYMM_MEM_DISABLE_MULTICAST:-1}
if [ "$NNODES" -gt 1 ]; then
  rdzv=(--nnodes="$NNODES" --node_rank="$NODE_RANK" --rdzv_id="$RDZV_ID" --rdzv_backend=c10d
        --rdzv_endpoint="$MASTER_ADDR:$MASTER_PORT")
else
  rdzv=(--standalone --nnodes=1)
fi
# TORCHRUN_EXTRA: more torchrun options, e.g. the signal forwarding of scripts/slurm/requeue.sbatch.
# shellcheck disable=SC2086
exec torchrun "${rdzv[@]}" ${TORCHRUN_EXTRA:-} --nproc_per_node="$NPROC_PER_NODE" -m flamia_train.train "$@"
