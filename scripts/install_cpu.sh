#!/usr/bin/env bash
# The CPU profile: a lean, pinned install of SGLang 0.5.23 + sglang-faser into .venv (about 3-4 minutes fresh).
#
# sglang's own requirements pull an 11 GB CUDA stack that cannot run on a CPU anyway (sglang-on-cpu.md §1), so
# sglang is installed --no-deps beside an explicit, pinned dependency list, all under requirements/cpu-lock.txt.
# Idempotent: a stamp holding the hash of the inputs skips everything when nothing changed.
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=${VENV:-.venv}
PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null 2>&1 || PY=python3
REQ=requirements
stamp="$VENV/.sglang-faser-cpu-stamp"
want=$(cat "$REQ"/*.txt pyproject.toml scripts/install_cpu.sh | sha256sum | cut -d' ' -f1)

if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi

echo "[install] creating $VENV (CPU profile)"
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
pip=("$VENV/bin/python" -m pip install --disable-pip-version-check -q)
# torch's CPU build: the team machines carry it in pip's local wheel directory; elsewhere use PyTorch's CPU index.
if ! "${pip[@]}" -c "$REQ/constraints-cpu.txt" torch==2.13.0 2>/dev/null; then
  "${pip[@]}" -c "$REQ/constraints-cpu.txt" torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu
fi
"${pip[@]}" --no-deps sglang==0.5.23
"${pip[@]}" -c "$REQ/constraints-cpu.txt" -c "$REQ/cpu-lock.txt" -r "$REQ/cpu-core.txt"
"${pip[@]}" -c "$REQ/constraints-cpu.txt" -c "$REQ/cpu-lock.txt" -r "$REQ/cpu-extra.txt"
"${pip[@]}" -c "$REQ/constraints-cpu.txt" -c "$REQ/cpu-lock.txt" -r "$REQ/dev.txt"
# PyPI's torchvision is a CUDA build; cpu_bootstrap defines the schemas it needs (sglang-on-cpu.md §2.1).
"${pip[@]}" --no-deps torchvision==0.28.0
"${pip[@]}" --no-deps -e .

# Every interpreter in this venv installs sglang_faser's import hooks (fallback sgl_kernel, torchvision fix).
site=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
echo "import sglang_faser.cpu_bootstrap as _f; _f.install()" > "$site/sglang_faser_cpu.pth"

"$VENV/bin/python" - <<'PY'
import sglang_faser.cpu_bootstrap as b, importlib
assert b.using_standin(), "a real sgl_kernel is installed: this venv is not a CPU profile"
import sgl_kernel, torchvision.transforms  # noqa: F401
print("[install] CPU profile ready: sgl_kernel stand-in and torchvision import")
PY
echo "$want" > "$stamp"
