"""A direct channel to the jsii kernel for the synth processes (issue 10: synth at scale).

Every construct call from Python is a round trip to the jsii kernel, a node process: about
330 a tenant stack. jsii's Python runtime does not talk to the kernel itself. It starts
``node jsii-runtime.js``, a relay whose only job is to start the kernel (``lib/program.js``)
as its own child and copy each request from its stdin to the kernel's fd 3, and each response
back, so a synth runs three processes where two do the work. On this machine (2 cores, two
synth workers) the relay costs about 15 % of the build: its own CPU (one core-second for
every 27 tenants) and two more context switches a round trip.

`install()` makes the runtime start the kernel directly, its fd 3 one end of a socket pair
whose other end the runtime reads and writes (what the relay's own ``stdio: "pipe"`` is). The
requests, the responses, the handshake (the runtime checks the kernel's version) and the exit
message are the runtime's own code, unchanged; the kernel's console output goes straight to
this process's stdout and stderr instead of through the relay's base64 framing.

Only the start is replaced, and only where it is known to work: a POSIX shell to put the
socket on fd 3, and the runtime's embedded files where this jsii version has them. Anywhere
else, or with ``ORDERED_INGEST_JSII_CHANNEL=relay`` in the environment (the way back to jsii's
own start, should the direct one ever misbehave), `install()` changes nothing and returns False. ``app.py`` installs it before the CDK
library is imported (the kernel starts at the first import), and so do the synth workers; the
tests keep jsii's own start, and `tests/test_parallel_synth.py` compares the assembly of the
relay in one process with the workers' on the direct channel, byte for byte.
"""

from __future__ import annotations

import atexit
import os
import platform
import shutil
import socket
import subprocess
import threading
from pathlib import Path
from typing import Any

#: The kernel's entry point, beside the relay's in the runtime's embedded files.
_PROGRAM = ("lib", "program.js")
#: The relay's options for the kernel (``bin/jsii-runtime.js``), and the runtime's heap size.
_NODE_OPTIONS = ("--max-old-space-size=4069", "--preserve-symlinks")
#: The environment variable that chooses the channel: ``direct`` (the default) or ``relay``.
CHANNEL_ENV = "ORDERED_INGEST_JSII_CHANNEL"
#: ``sh -c`` script: the kernel with the socket (stdin) moved to fd 3 and no stdin of its own.
_START = 'exec "$0" "$@" 3<&0 </dev/null'


class _Kernel:
    """What `jsii._kernel.providers.process._NodeProcess` uses of its ``subprocess.Popen``:
    the request stream (``stdin``), the response stream (``stdout``), ``stderr`` (closed at the
    end), ``wait`` and ``terminate``; here the first two are the two directions of a socket."""

    def __init__(self, process: subprocess.Popen, channel: socket.socket) -> None:
        self._process = process
        self._channel = channel
        self.stdin = channel.makefile("wb")
        self.stdout = channel.makefile("rb")
        self.stderr = open(os.devnull, "rb")  # noqa: SIM115 (closed by the runtime's stop())

    def wait(self, timeout: float | None = None) -> int:
        code = self._process.wait(timeout=timeout)
        self._channel.close()
        return code

    def terminate(self) -> None:
        self._process.terminate()


def _start(self: Any) -> None:
    """`_NodeProcess.start`, the kernel started directly: the same environment and agent
    string, the kernel's options from the relay, then the runtime's own handshake."""
    environ = os.environ.copy()
    environ["JSII_AGENT"] = f"Python/{platform.python_version()}"
    program = Path(self._jsii_runtime()).parent.parent.joinpath(*_PROGRAM)
    ours, theirs = socket.socketpair()
    with theirs:
        process = subprocess.Popen(
            ["/bin/sh", "-c", _START, environ.get("JSII_NODE", "node"), *_NODE_OPTIONS, str(program)],
            stdin=theirs, env=environ,
        )
    self._process = _Kernel(process, ours)
    # The runtime's stop() joins its stderr reader: here there is nothing to read.
    self.sink_thread = threading.Thread(name="process.stderr_sink", target=lambda: None, daemon=True)
    self.sink_thread.start()
    atexit.register(self.stop)
    self.handshake()


def install() -> bool:
    """Start the jsii kernel of this process directly (call before importing the CDK library).
    Returns False, changing nothing, where the direct start is not known to work."""
    try:
        from jsii._embedded import jsii as embedded
        from jsii._kernel.providers import process
    except ImportError:
        return False
    node_process = getattr(process, "_NodeProcess", None)
    if (
        os.environ.get(CHANNEL_ENV, "direct") == "relay"
        or os.name != "posix"
        or "JSII_RUNTIME" in os.environ  # a runtime of the user's choice: leave its start alone
        or not Path("/bin/sh").exists()
        or node_process is None
        or not all(hasattr(node_process, name) for name in ("start", "stop", "handshake", "_jsii_runtime"))
        or "/".join(_PROGRAM) not in getattr(embedded, "EMBEDDED_FILES", {}).values()
        or shutil.which(os.environ.get("JSII_NODE", "node")) is None
    ):
        return False
    node_process.start = _start
    return True
