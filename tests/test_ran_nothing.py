"""tests/ran_nothing.py: a parametrised test whose every runnable case skips itself fails; one with a case that
ran (an expected failure included), or whose cases all skipped at setup (no device), passes."""
import os
import subprocess
import sys

CASES = '''
import pytest

@pytest.mark.parametrize("n", [1, 2])
def test_all_skip_themselves(n):
    pytest.skip("a kernel that cannot take the problem")

@pytest.mark.parametrize("n", [1, 2])
def test_one_runs(n):
    if n == 1:
        pytest.skip("not this one")

@pytest.mark.parametrize("n", [1, 2])
def test_one_expected_to_fail(n):
    if n == 1:
        pytest.xfail("a known bug")
    pytest.skip("not this one")

@pytest.mark.skipif(True, reason="no device")
@pytest.mark.parametrize("n", [1, 2])
def test_no_device(n):
    pytest.skip("unreachable")
'''


def test_a_test_that_skips_every_case_fails(tmp_path):
    (tmp_path / "test_cases.py").write_text(CASES)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([root, os.environ.get("PYTHONPATH", "")]))
    r = subprocess.run([sys.executable, "-m", "pytest", "-p", "tests.ran_nothing", "-p", "no:cacheprovider", "-rA",
                        "-q", str(tmp_path / "test_cases.py")], capture_output=True, text=True, cwd=tmp_path, env=env,
                       timeout=120)
    out = r.stdout
    assert "FAILED test_cases.py::test_all_skip_themselves[2]" in out, out
    assert "every case that could run skipped itself" in out, out
    assert "1 failed, 1 passed, 5 skipped, 1 xfailed" in out, out
