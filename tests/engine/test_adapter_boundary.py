"""Every SGLang import, attribute access and patch of the engine layer lives in ``engine/touchpoints.py``.

An SGLang upgrade then revisits exactly one file. The check is on the syntax tree of every other module under
``sglang_faser/`` (the pure core, the launcher, the engine's step, verify, draft and control modules): no
``import sglang...`` at any depth, and no attribute access by one of the SGLang names the adapter declares
(``touchpoints.SGLANG_NAMES``) other than an override's ``super().name`` call.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import sglang_faser
from sglang_faser.engine import touchpoints

PACKAGE = Path(sglang_faser.__file__).parent
ADAPTER = Path(touchpoints.__file__)
MODULES = sorted(p for p in PACKAGE.rglob("*.py") if p != ADAPTER and "models" not in p.parts
                 and "kernels" not in p.parts)  # the CPU kernels implement sgl_kernel's ops, not SGLang's


def _violations(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found += [f"import {a.name}" for a in node.names if a.name.split(".")[0] == "sglang"]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "sglang":
            found.append(f"from {node.module} import ...")
        elif isinstance(node, ast.Attribute) and node.attr in touchpoints.SGLANG_NAMES and not _is_super(node):
            found.append(f".{node.attr} (line {node.lineno})")
    return found


def _is_super(node: ast.Attribute) -> bool:
    """``super().name``: an override calling SGLang's own method (the worker mixin's one-line overrides)."""
    value = node.value
    return isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id == "super"


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_only_the_adapter_touches_sglang(path):
    assert _violations(path) == []


def test_the_check_catches_a_direct_access(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("from sglang.srt.utils import x\n\ndef f(batch):\n    return batch.spec_info.draft_token_num\n")
    assert _violations(bad) == ["from sglang.srt.utils import ...", ".draft_token_num (line 4)",
                                ".spec_info (line 4)"]
