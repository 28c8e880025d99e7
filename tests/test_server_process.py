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


def test_a_script_in_another_tree_launches_that_trees_sglang_faser(tmp_path):
    """A benchmark started from a git worktree: the start-up hook has already imported the editable install's
    ``sglang_faser``, yet the server must run the worktree's."""
    tree = tmp_path / "worktree"
    (tree / "sglang_faser").mkdir(parents=True)
    (tree / "sglang_faser" / "__init__.py").write_text("")
    (tree / "benchmarks").mkdir()
    script = tree / "benchmarks" / "probe.py"
    script.write_text("from sglang_faser.server_process import ServerProcess, launching_tree\n"
                      "print(launching_tree())\n"
                      "print(ServerProcess(['--model-path', 'x']).child_env()['PYTHONPATH'])\n")
    out = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True)
    found, path = out.stdout.split()
    assert found == str(tree) and path.split(os.pathsep)[0] == str(tree), out.stderr
    # an installed tool's script (pytest's, say) inside a virtual environment that lies in a tree: not that tree
    tool = tree / ".venv" / "lib" / "site-packages" / "tool.py"
    tool.parent.mkdir(parents=True)
    tool.write_text("from sglang_faser.server_process import launching_tree\nprint(launching_tree())\n")
    out = subprocess.run([sys.executable, str(tool)], cwd=tmp_path, capture_output=True, text=True)
    assert out.stdout.strip() == str(ROOT), out.stderr
