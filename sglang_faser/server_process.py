"""Start ``python -m sglang_faser.launch_server`` as a child process and wait until it serves.

Shared by the demo, the tests and the benchmarks, so that all of them launch the server exactly as an operator
would. The child gets its own process group; ``stop()`` ends it and every scheduler/detokenizer below it.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import requests


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServerProcess:
    def __init__(self, args: list[str], port: int | None = None, log_path: Path | None = None):
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.args = [sys.executable, "-m", "sglang_faser.launch_server", *args]
        self.args += ["--host", "127.0.0.1", "--port", str(self.port)]
        # every server gets its own control port, so that several can run side by side (default 50051 would clash)
        self.control_port = None
        if not any(a.startswith("--faser-control-port") for a in args):
            self.control_port = free_port()
            self.args += ["--faser-control-port", str(self.control_port)]
        self.control_target = f"127.0.0.1:{self.control_port}" if self.control_port else None
        self.log_path = log_path
        self._log = None
        self.proc: subprocess.Popen | None = None

    def start(self, timeout: float = 300.0) -> ServerProcess:
        self._log = open(self.log_path, "wb") if self.log_path else subprocess.DEVNULL
        self.proc = subprocess.Popen(
            self.args, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True, env=os.environ.copy()
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}; {self._log_tail()}")
            try:
                if requests.get(self.url + "/health", timeout=2).status_code == 200:
                    return self
            except requests.RequestException:
                pass
            time.sleep(0.5)
        self.stop()
        raise TimeoutError(f"server not ready after {timeout:.0f}s; {self._log_tail()}")

    def _log_tail(self) -> str:
        if not self.log_path or not Path(self.log_path).exists():
            return "no log kept"
        return "log tail:\n" + Path(self.log_path).read_text(errors="replace")[-3000:]

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
                self.proc.wait(timeout=30)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                try:
                    os.killpg(self.proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        if self._log not in (None, subprocess.DEVNULL):
            self._log.close()

    def __enter__(self) -> ServerProcess:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
