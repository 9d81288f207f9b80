# CUDA image that installs flamia-train the way the README does and trains by default.
FROM pytorch/pytorch:2.11.0-cuda12.8-cudnn9-runtime
WORKDIR /workspace/flamia-train
COPY . .
# torch comes from the base image (CUDA build, with its own Triton); install the rest editable,
# as the README's train command does.
RUN python3 -m pip install --no-cache-dir -e . && rm -rf /root/.cache
ENV NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 WANDB_MODE=offline
# Default: pretrain the small GPT on the embedded corpus. Pass Hydra overrides as arguments,
# e.g. `docker run --gpus all IMAGE model=gpt-125m`; multi-GPU: override the entrypoint with scripts/launch.sh.
ENTRYPOINT ["flamia-train"]
