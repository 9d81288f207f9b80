"""scripts/device/floor_probe.py: the probe tree (the Gluon kernels without their off-diagonal elementwise work) is
written from the kernels as they are now — every replacement applies once, so a kernel edit that moves the code
fails here, not silently on the GPU — and it never overwrites a folder that is not a probe."""
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TOOL = [sys.executable, str(ROOT / "scripts/device/floor_probe.py")]


def _markers(kernels: Path) -> dict:
    return {f.name: f.read_text().count("FLOOR PROBE") for f in kernels.glob("*.py") if "FLOOR PROBE" in f.read_text()}


def test_the_probe_applies_to_the_kernels_as_they_are(tmp_path):
    for sub, want in ((32, {"attention_fwd_gluon.py": 1, "attention_bwd_gluon.py": 2}),
                      (64, {"attention_fwd_gluon.py": 1, "attention_bwd_gluon.py": 3, "attention_dkdv_ws.py": 1})):
        out = subprocess.run([*TOOL, str(tmp_path / f"p{sub}"), "--sub", str(sub)], capture_output=True, text=True,
                             timeout=120, cwd=ROOT)
        assert out.returncode == 0, out.stderr[-2000:]
        kernels = tmp_path / f"p{sub}" / "kernels"
        assert _markers(kernels) == want, _markers(kernels)
        # everything else is the package's own code
        same = [f.name for f in (ROOT / "kernels").glob("*.py") if f.read_text() == (kernels / f.name).read_text()]
        assert len(same) == len(list((ROOT / "kernels").glob("*.py"))) - len(want)
    # the forward's probe keeps the running statistics' shapes: P is S, alpha one
    assert "return s, m_i, l_i, m_i * 0.0 + 1.0" in (tmp_path / "p32/kernels/attention_fwd_gluon.py").read_text()


def test_a_folder_that_is_not_a_probe_is_left_alone(tmp_path):
    mine = tmp_path / "mine" / "kernels"
    mine.mkdir(parents=True)
    (mine / "notes.py").write_text("keep = True\n")
    out = subprocess.run([*TOOL, str(tmp_path / "mine")], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert out.returncode != 0 and "is not a floor probe: not overwritten" in out.stderr
    assert (mine / "notes.py").read_text() == "keep = True\n"
    # a probe folder is replaced by a fresh probe
    assert subprocess.run([*TOOL, str(tmp_path / "p")], cwd=ROOT, timeout=120).returncode == 0
    assert subprocess.run([*TOOL, str(tmp_path / "p")], cwd=ROOT, timeout=120).returncode == 0
