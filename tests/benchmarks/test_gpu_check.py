"""benchmarks.gpu_check (``make gpu-check``): one line per check in order, a crash reported as
that check's FAIL, SKIP lines and exit 0 without CUDA (FAIL where a GPU is there that torch
cannot use), and the whole script on the CPU at toy sizes."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
from benchmarks.gpu_check import QUICK, Check, check_names, decode_check, main, run_checks

from benchmarks import gpu_check
from tests.conftest import REPO_ROOT

CPU = torch.device("cpu")


def test_the_train_and_decode_checks_pass_for_a_one_step_and_a_multistep_family() -> None:
    for family in ("rk2-gated", "ab2"):
        train = gpu_check.train_check(family, QUICK, CPU)
        decode = decode_check(family, QUICK, CPU)
        assert train.status == decode.status == "PASS", (train, decode)
        assert "bf16 loss" in train.detail and "cached == uncached" in decode.detail


def test_run_checks_reports_every_check_in_order_and_a_crash_as_its_fail(monkeypatch) -> None:
    def crash(family: str, sizes: object, device: object) -> Check:
        if family == "rk4":
            raise RuntimeError("CUDA error: an illegal memory access\nsecond line")
        return Check("PASS", f"train-{family}", "ok")

    monkeypatch.setattr(gpu_check, "pytest_check", lambda name, *args: Check("PASS", name, "ok"))
    monkeypatch.setattr(gpu_check, "train_check", crash)
    monkeypatch.setattr(gpu_check, "decode_check", lambda f, s, d: Check("PASS", f"decode-{f}", ""))
    seen: list[str] = []
    checks = run_checks(CPU, QUICK, [], report=lambda check: seen.append(check.line()))
    assert [c.name for c in checks] == check_names() and seen == [c.line() for c in checks]
    failed = [c for c in checks if c.status == "FAIL"]
    assert failed == [
        Check("FAIL", "train-rk4", "RuntimeError: CUDA error: an illegal memory access")
    ]
    assert checks[-1].status == "SKIP" and "NCCL needs CUDA" in checks[-1].detail


@pytest.mark.parametrize(("gpu", "status", "code"), [(False, "SKIP", 0), (True, "FAIL", 1)])
def test_without_cuda_every_line_is_a_skip_unless_a_gpu_is_there(
    monkeypatch, capsys, gpu, status, code
) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(gpu_check, "gpu_present", lambda: gpu)
    assert main([]) == code
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == len(check_names()) + 1
    assert lines[0].startswith(f"{status} device: ")
    assert ("torch cannot use it" in lines[0]) == gpu
    assert all(line.startswith("SKIP ") and "no CUDA device" in line for line in lines[1:-1])
    assert lines[-1].startswith(f"gpu-check: 0 passed, {int(gpu)} failed")


def test_the_pytest_summary_line_is_read_without_its_time() -> None:
    lines = ["....", "FAILED tests/a.py::test_x - assert 1", "1 failed, 299 passed in 81.2s"]
    assert gpu_check._summary(lines) == "1 failed, 299 passed"
    assert gpu_check._summary(["== 2 passed, 8 deselected in 3.1s =="]) == "2 passed, 8 deselected"


@pytest.mark.slow
def test_the_script_runs_every_check_on_the_cpu_at_toy_sizes() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.gpu_check", "--device", "cpu", "--quick"],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert [line.split(":")[0].split(" ", 1)[1] for line in lines[:-1]] == check_names()
    assert all(line.startswith("PASS ") for line in lines[:-2]) and lines[-2].startswith("SKIP")
    assert lines[-1].startswith(f"gpu-check: {len(check_names()) - 1} passed, 0 failed, 1 skipped")
