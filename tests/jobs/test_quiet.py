"""TensorFlow's C++ start-up chatter stays out of the user's terminal: it buries the
one line tpuctl prints about the run.

The lines below are what TensorFlow 2.21 printed on this project's CPU-only machines when
``python -m jobs.bert.tiny`` ran (and ``make demo`` showed), whatever TF_CPP_MIN_LOG_LEVEL said;
tensorflow/tensorflow#100442 reports the same for 2.19 ("TF_CPP_MIN_LOG_LEVEL=3 doesn't silence
import warnings"), with the older ``2025-09-17 14:44:05.157831: I external/...`` format.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from jobs.quiet import is_noise, wanted
from tests.conftest import REPO

SEEN = [
    b"WARNING: All log messages before absl::InitializeLog() is called are written to STDERR",
    (b"I0000 00:00:1795540508.383467   10082 port.cc:153] oneDNN custom operations are on. You may see "
     b"slightly different numerical results due to floating-point round-off errors."),
    (b"I0000 00:00:1795540508.383792   10082 cudart_stub.cc:31] Could not find cuda drivers on your "
     b"machine, GPU will not be used."),
    (b"E0000 00:00:1795540510.968669   10082 cuda_platform.cc:52] failed call to cuInit: INTERNAL: CUDA "
     b"error: Failed call to cuInit: UNKNOWN ERROR (303)"),
    (b"2025-09-17 14:44:05.157831: I external/local_xla/xla/tsl/cuda/cudart_stub.cc:32] Could not find "
     b"cuda drivers on your machine, GPU will not be used."),
    (b"E0000 00:00:1758131045.203198 3722035 cuda_dnn.cc:8579] Unable to register cuDNN factory: Attempting "
     b"to register factory for plugin cuDNN when one has already been registered"),
]
KEPT = [
    b"Traceback (most recent call last):",
    b"tpuctl: error: train_batch_size 16 does not divide over 32 replicas",
    b"E0000 00:00:1795540510.968669   10082 bfc_allocator.cc:485] Allocator ran out of memory",
    b"F0000 00:00:1795540510.968669   10082 tpu_init.cc:12] Check failed: chips > 0",
    b"WARNING:tensorflow:Detecting that an object or model or tf.train.Checkpoint is being deleted",
]


@pytest.mark.parametrize("line", SEEN)
def test_start_up_noise_is_recognised(line):
    assert is_noise(line)


@pytest.mark.parametrize("line", KEPT)
def test_what_a_user_must_read_is_kept(line):
    assert not is_noise(line)


def test_the_job_runner_keeps_cpp_warnings_but_not_the_gpu_probe():
    warning = b"W0000 00:00:1795540510.1   10082 loop_optimizer.cc:933] Skipping loop optimization"
    assert is_noise(warning) and not is_noise(warning, keep_warnings=True)
    assert is_noise(SEEN[3], keep_warnings=True) and is_noise(SEEN[1], keep_warnings=True)


def test_asking_for_the_logs_turns_the_filter_off():
    assert wanted(False, {})
    assert not wanted(True, {})
    assert not wanted(False, {"TF_CPP_MIN_LOG_LEVEL": "0"})


def test_the_tiny_bert_step_prints_no_tensorflow_noise(tiny_bert):
    """The session's real `python -m jobs.bert.tiny DIR` run (tests/conftest.py), TF_CPP_MIN_LOG_LEVEL
    unset as on a newcomer's machine: its stderr has none of TensorFlow's start-up lines."""
    err = (tiny_bert.parent / "tiny.stderr").read_bytes()
    assert b"absl::InitializeLog" not in err and b"cuInit" not in err and b"cudart_stub" not in err, err
    assert err.strip() == b"", err


def test_the_filter_drops_native_noise_and_passes_the_rest_through_in_order():
    """Lines written straight onto fd 2 (as TensorFlow's C++ does), around a Python error line."""
    first, second = SEEN[0] + b"\n" + SEEN[3] + b"\n", SEEN[2] + b"\nsecond\n"
    code = ("import os, sys\n"
            "from jobs.quiet import quiet_tensorflow\n"
            "quiet_tensorflow()\n"
            f"os.write(2, {first!r})\n"
            "print('first', file=sys.stderr, flush=True)\n"
            f"os.write(2, {second!r})\n"
            "os.write(2, b'no newline at the end')\n")
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    proc = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, cwd=REPO, env=env, timeout=60)
    assert proc.returncode == 0
    assert proc.stderr == b"first\nsecond\nno newline at the end"
    proc = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, cwd=REPO, timeout=60,
                          env={**env, "TF_CPP_MIN_LOG_LEVEL": "0"})
    assert SEEN[3] in proc.stderr  # the user asked for TensorFlow's logs: nothing is dropped


def test_a_line_just_before_os_exit_is_not_lost():
    """The job's immediate exit (jobs/runner/preemption.py: os._exit(42)) drains the filter first."""
    code = ("import os, sys\n"
            "from jobs.quiet import drain, quiet_tensorflow\n"
            "quiet_tensorflow()\n"
            "print('jobs: warning: checkpoint not written', file=sys.stderr, flush=True)\n"
            "drain()\n"
            "os._exit(42)\n")
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    proc = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, cwd=REPO, env=env,
                          timeout=60)
    assert proc.returncode == 42 and proc.stderr == b"jobs: warning: checkpoint not written\n"
