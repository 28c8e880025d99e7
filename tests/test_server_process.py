"""Which code a launched server runs: the ``sglang_faser`` of the process that launched it."""

from __future__ import annotations

import os
import subprocess
import sys

from sglang_faser.server_process import ROOT, ServerProcess


def test_a_server_child_imports_the_launching_trees_sglang_faser_and_a_callers_path_wins(tmp_path):
    env = ServerProcess(["--model-path", "x"]).child_env()
    assert env["PYTHONPATH"].split(os.pathsep)[0] == str(ROOT) and env["PYTHONSAFEPATH"] == "1"
    # what the child's interpreter imports, started from another directory
    code = "import sglang_faser, pathlib; print(pathlib.Path(sglang_faser.__file__).resolve().parent.parent)"
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=tmp_path, capture_output=True, text=True)
    assert out.stdout.strip() == str(ROOT), out.stderr
    tree = str(tmp_path / "base")
    assert ServerProcess(["--model-path", "x"], env={"PYTHONPATH": tree}).child_env()["PYTHONPATH"] == tree
