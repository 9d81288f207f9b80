"""scripts/device/with_constants.py: a script runs with flamia_kernels constants replaced (how a device call
times a kernel variant without editing the package); bad requests are refused with what is allowed."""
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TOOL = [sys.executable, str(ROOT / "scripts/device/with_constants.py")]


def test_the_target_sees_the_replaced_constants(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text("import sys\nfrom flamia_kernels import attention_bwd_copies as C, attention_bwd_gluon as G\n"
                     "print('argv', sys.argv[1:], G.DQ_STAGES, C.KEY_COPIES_SPLIT)\n")
    out = subprocess.run([*TOOL, "attention_bwd_gluon.DQ_STAGES={32: 3, 64: 3}",
                          "attention_bwd_copies.KEY_COPIES_SPLIT=False", "--", str(probe), "--seq", "8"],
                         capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "argv ['--seq', '8'] {32: 3, 64: 3} False" in out.stdout, out.stdout


def test_bad_requests_are_refused():
    out = subprocess.run([*TOOL, "attention_bwd_gluon.NO_SUCH=1", "--", "x.py"], capture_output=True, text=True,
                         timeout=300, cwd=ROOT)
    assert out.returncode != 0 and "has no constant 'NO_SUCH'" in out.stderr
    out = subprocess.run([*TOOL, "attention_bwd_gluon.DQ_STAGES=2"], capture_output=True, text=True, timeout=300,
                         cwd=ROOT)
    assert out.returncode != 0 and "usage: with_constants.py" in out.stderr
    out = subprocess.run([*TOOL, "attention_bwd_gluon.DQ_STAGES=two", "--", "x.py"], capture_output=True, text=True,
                         timeout=300, cwd=ROOT)
    assert out.returncode != 0 and "must be a Python literal" in out.stderr and "'two'" in out.stderr
