"""scripts/fp8_dq_scale_probe.py reads what it says: ρ at or above each query's exact amax scale, and the FP8 dQ
under the three scales within a hair of each other (the finding it records), on fresh N(0,1) inputs."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
import fp8_dq_scale_probe as probe  # noqa: E402


def test_scale_probe_errors_and_bits():
    e = probe.errors(1.0, False, seq=256)
    assert e["bits above"] >= 0  # ρ bounds every |dS·s_k| of its row: never below the exact scale
    assert 0 < e["bf16 dS"] < e["rho"] < 0.2
    assert abs(e["row amax"] - e["rho"]) <= 0.02 * e["rho"] and abs(e["key-block amax"] - e["rho"]) <= 0.02 * e["rho"]
