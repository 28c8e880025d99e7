"""One run, one version: every server a benchmark starts must run the ``sglang_faser`` its first server ran.

A regret run starts a server per configuration and repeat over half an hour; an edit to the working tree meanwhile
reaches every later server, and the run then compares versions instead of configurations. That happened once and
was only noticed from the numbers (FASER's cells collapsed while the others ran normally), so the runs now stop at
the first server that would run other code, and record the code they ran (``ServerProcess.code``).
"""

from __future__ import annotations


class CodeChanged(Exception):
    """Not a ``RuntimeError``: a benchmark that skips a configuration whose server failed must stop here."""


class SameCode:
    def __init__(self) -> None:
        self.code: dict[str, str] = {}  # version ("new", "base") -> the fingerprint its first server ran

    def check(self, server, version: str = "new") -> None:
        """Raise ``CodeChanged`` where ``server`` runs other code than ``version``'s first server (the caller stops
        its servers, as after any failed start)."""
        first = self.code.setdefault(version, server.code)
        if server.code != first:
            raise CodeChanged(f"sglang_faser changed during the run ({version}: {first} -> {server.code}); its "
                              "results would mix two versions. Run benchmarks from a git worktree to edit meanwhile.")
