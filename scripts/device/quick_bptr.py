"""One short GPU check of the forward's BPTR launch option: bit-identical outputs and the kernel time
against the default launch at S = 8k, D = 128, B×H = 4×16 (the profile's shape)."""
import torch
import triton.testing
from flamia_kernels import AttentionSpec, attention_fwd
from flamia_kernels import quantize as QZ
from flamia_kernels.attention_operands import prepare_forward

spec = AttentionSpec.parse("fp8")
q, k, v = (torch.randn(4, 16, 8192, 128, device="cuda", dtype=torch.bfloat16) for _ in range(3))
ops = prepare_forward(q, k, v, spec, True, QZ, 128, v_transposed=True)
base = attention_fwd.launch_config(128, False)
run = lambda cfg: attention_fwd.forward(ops.q, ops.k, ops.v, spec, True, True, 128 ** -0.5, 128, True, config=cfg)  # noqa
a, b = run(base), run({**base, "BPTR": True})
print("bit-identical:", all(torch.equal(x, y) for x, y in zip(a, b, strict=True)), flush=True)
for name, cfg in (("default 8x3", base), ("bptr 8x3", {**base, "BPTR": True}), ("default 8x3", base)):
    print(name, f"{triton.testing.do_bench(lambda cfg=cfg: run(cfg), warmup=50, rep=300):.3f} ms", flush=True)
