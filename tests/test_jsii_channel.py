"""The direct channel to the jsii kernel (`pipeline_constructs/jsii_channel.py`): a process
that installs it talks to the kernel itself (no relay process), gets its answers and its
errors, and exits cleanly; ``ORDERED_INGEST_JSII_CHANNEL=relay`` keeps jsii's own start.
That the channel writes the same cloud assembly is `tests/test_parallel_synth.py`'s."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from pipeline_constructs import jsii_channel
from tests.conftest import ROOT

#: Runs in a fresh interpreter (the kernel starts once a process, at the CDK library's import).
PROBE = """
import json, os, sys
from pipeline_constructs import jsii_channel
installed = jsii_channel.install()
import aws_cdk
import jsii._kernel
kernel = jsii._kernel.Kernel().provider._process._process
seconds = aws_cdk.Duration.minutes(2).to_seconds()
try:
    aws_cdk.Duration.seconds(-1)
    error = None
except Exception as caught:
    error = str(caught)
pid = getattr(getattr(kernel, "_process", kernel), "pid")
with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
    command = [part.decode() for part in cmdline.read().split(b"\\0") if part]
print(json.dumps({"installed": installed, "seconds": seconds, "error": error, "command": command}))
"""


def probe(**environ: str) -> dict:
    result = subprocess.run([sys.executable, "-c", PROBE], check=False, cwd=ROOT, env={**os.environ, **environ},
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.splitlines()[-1])


def test_the_kernel_is_started_directly_and_answers_through_the_channel():
    # GIVEN a process that installs the channel before importing the CDK library
    # WHEN it calls the CDK library (a value, then a call the library refuses)
    outcome = probe()
    # THEN the kernel itself is its child, not jsii's relay, and both the answer and the
    # library's error come back; the process exits 0 (the kernel stops at exit)
    assert outcome["installed"] is True
    assert outcome["command"][-1].endswith("/lib/program.js")
    assert not any(part.endswith("jsii-runtime.js") for part in outcome["command"])
    assert outcome["seconds"] == 120
    assert "negative" in outcome["error"]


def test_relay_in_the_environment_keeps_jsiis_own_start():
    outcome = probe(**{jsii_channel.CHANNEL_ENV: "relay"})
    assert outcome["installed"] is False
    assert outcome["command"][-1].endswith("/bin/jsii-runtime.js")
    assert outcome["seconds"] == 120
    assert "negative" in outcome["error"]


def test_a_runtime_of_the_users_choice_is_left_alone(monkeypatch):
    monkeypatch.setenv("JSII_RUNTIME", "/opt/jsii/runtime.js")
    assert jsii_channel.install() is False
