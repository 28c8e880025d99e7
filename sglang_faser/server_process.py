"""Start ``python -m sglang_faser.launch_server`` as a child process and wait until it serves.

Shared by the demo, the tests and the benchmarks, so that all of them launch the server exactly as an operator
would. The child gets its own process group; ``stop()`` ends it and every scheduler/detokenizer below it.
"""

from __future__ import annotations

import hashlib
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import requests


ROOT = Path(__file__).resolve().parent.parent  # the tree this ``sglang_faser`` was imported from


def launching_tree() -> Path:
    """The tree whose ``sglang_faser`` a launched server runs: the one the running script belongs to (a benchmark
    started from a git worktree), else ``ROOT`` (also for an installed tool's script, such as pytest's inside a
    virtual environment that may itself lie in a tree). The CPU start-up hook (``sglang_faser_cpu.pth``) imports
    ``sglang_faser`` through the editable install before a script can put its own tree first, so ``ROOT`` alone
    is the main checkout's even for a worktree's script."""
    script = getattr(sys.modules.get("__main__"), "__file__", None)
    if script and "site-packages" not in Path(script).parts:
        for parent in Path(script).resolve().parents:
            if (parent / "sglang_faser" / "__init__.py").is_file():
                return parent
    return ROOT


def code_fingerprint(tree: Path) -> str:
    """A short hash of the ``sglang_faser`` sources under ``tree`` (paths and contents): what a server launched from
    it runs. A benchmark that starts servers over half an hour compares each server's with the first one's, since
    an edit to the working tree meanwhile changes what its later servers run (a regret run whose FASER servers
    ran half-edited code was only noticed from its numbers)."""
    digest = hashlib.sha1()
    for path in sorted((tree / "sglang_faser").rglob("*.py")):
        digest.update(str(path.relative_to(tree)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:12]


# uvicorn's message for a taken HTTP port, and the launcher's for a taken control port
_BIND_FAILED = (b"error while attempting to bind", b"could not start (Failed to bind")


class _PortTaken(Exception):
    """The server's HTTP or control port was taken between choosing it and binding it."""


def _ephemeral_range() -> tuple[int, int]:
    try:
        low, high = open("/proc/sys/net/ipv4/ip_local_port_range").read().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999


def free_port() -> int:
    """A loopback port that is free now and outside the kernel's ephemeral range.

    A port the kernel hands out for ``bind(0)`` is released again before the server binds it, tens of seconds
    later; meanwhile any outgoing connection or ``bind(0)`` of the starting engine (gloo, ZMQ, the control server)
    may be given the same number. Ports below the ephemeral range are never handed out that way.
    """
    low, _ = _ephemeral_range()
    rng = random.SystemRandom()
    for _ in range(200):
        port = rng.randrange(15000, max(15001, low - 1200))  # SGLang's nccl port is port + 100..1000
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServerProcess:
    def __init__(self, args: list[str], port: int | None = None, log_path: Path | None = None,
                 env: dict[str, str] | None = None):
        """``env``: variables set for the child on top of this process's environment."""
        self._user_args = list(args)
        self._env = dict(env or {})
        self._fixed_port = port
        self.log_path = log_path
        self._log = None
        self.proc: subprocess.Popen | None = None
        self.code: str | None = None  # ``code_fingerprint`` of the tree it was started from
        self._assign_ports()

    def _assign_ports(self) -> None:
        self.port = self._fixed_port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.args = [sys.executable, "-m", "sglang_faser.launch_server", *self._user_args]
        self.args += ["--host", "127.0.0.1", "--port", str(self.port)]
        # every server gets its own control port, so that several can run side by side (default 50051 would clash)
        self.control_port = None
        if not any(a.startswith("--faser-control-port") for a in self._user_args):
            self.control_port = free_port()
            self.args += ["--faser-control-port", str(self.control_port)]
        self.control_target = f"127.0.0.1:{self.control_port}" if self.control_port else None

    def start(self, timeout: float = 300.0, attempts: int = 3) -> ServerProcess:
        """Start the server; if a port it was given got taken meanwhile, try again on fresh ports."""
        for attempt in range(attempts):
            try:
                return self._start_once(timeout)
            except _PortTaken:
                self.stop()
                if self._fixed_port or attempt == attempts - 1:
                    raise RuntimeError(f"server could not bind its ports; {self._log_tail()}") from None
                self._assign_ports()
        raise AssertionError("unreachable")

    def child_env(self) -> dict[str, str]:
        """The server's environment: this process's, with this ``sglang_faser``'s tree first on the path (and
        PYTHONSAFEPATH, so ``python -m`` does not put the working directory before it), then the caller's
        variables. A benchmark run from a git worktree otherwise served the code the editable install points
        at, whatever was being edited there (``launching_tree``)."""
        path = os.pathsep.join(filter(None, [str(launching_tree()), os.environ.get("PYTHONPATH")]))
        return {**os.environ, "PYTHONPATH": path, "PYTHONSAFEPATH": "1", **self._env}

    def _start_once(self, timeout: float) -> ServerProcess:
        env = self.child_env()
        self.code = code_fingerprint(Path(env["PYTHONPATH"].split(os.pathsep)[0]))
        self._log = open(self.log_path, "wb") if self.log_path else subprocess.PIPE
        self.proc = subprocess.Popen(
            self.args, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True, env=env,
        )
        if self._log is subprocess.PIPE:  # no log kept: drain the pipe, remembering only a bind failure
            self._bind_failed = False
            threading.Thread(target=self._drain, daemon=True).start()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._saw_bind_failure():
                raise _PortTaken()
            if self.proc.poll() is not None:
                time.sleep(0.2)  # let the drain thread read the last lines
                if self._saw_bind_failure():
                    raise _PortTaken()
                raise RuntimeError(f"server exited with {self.proc.returncode}; {self._log_tail()}")
            try:
                if requests.get(self.url + "/health", timeout=2).status_code == 200:
                    return self
            except requests.RequestException:
                pass
            time.sleep(0.5)
        self.stop()
        raise TimeoutError(f"server not ready after {timeout:.0f}s; {self._log_tail()}")

    def _drain(self) -> None:
        for line in self.proc.stdout:
            if any(marker in line for marker in _BIND_FAILED):
                self._bind_failed = True

    def _saw_bind_failure(self) -> bool:
        if self.log_path and Path(self.log_path).exists():
            text = Path(self.log_path).read_bytes()
            return any(marker in text for marker in _BIND_FAILED)
        return getattr(self, "_bind_failed", False)

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
        if self._log not in (None, subprocess.PIPE):
            self._log.close()
        self._log = None

    def __enter__(self) -> ServerProcess:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
