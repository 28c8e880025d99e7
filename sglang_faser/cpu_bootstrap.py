"""Import hooks that let SGLang 0.5.23's real CPU runtime start on a lean install.

Two problems are solved here, both at import time and in every interpreter (the scheduler and detokenizer are
spawned children, so patching the launcher alone is not enough; see sglang-0.5.23-map.md §8.1):

* ``sgl_kernel``: several SGLang modules run ``from sgl_kernel import <op>_cpu`` when they are imported. PyPI only
  has a CUDA build, so the CPU profile installs none, and ``_FallbackSglKernelFinder`` serves our PyTorch stand-in
  (``sglang_faser.kernels.cpu``) instead. The finder sits *last* on ``sys.meta_path``: a real ``sgl_kernel``,
  wherever installed, always wins, so a GPU install never sees the stand-in.
* ``torchvision``: PyPI's torchvision 0.28.0 is a CUDA build; beside CPU torch its meta registrations die on the
  missing ``torchvision::nms`` schema. Defining the two schemas first lets it import with ``_has_ops() == False``
  (sglang-on-cpu.md §2.1).

``sglang_faser_cpu.pth`` (written into site-packages by ``scripts/install_cpu.sh``) calls :func:`install` at
interpreter start, so this module must stay cheap: nothing here imports torch until a hook actually fires.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types

STANDIN_MARKER = "__sglang_faser_standin__"
# Submodules SGLang imports unconditionally on a CPU run. Any other ``sgl_kernel.*`` raises ModuleNotFoundError,
# so SGLang's own ``try: from sgl_kernel.scalar_type import ... except ImportError`` fallbacks still work.
STANDIN_MODULES = ("sgl_kernel", "sgl_kernel.speculative", "sgl_kernel.mamba")


def _raise_missing(name: str):
    def missing(*args, **kwargs):
        raise NotImplementedError(
            f"sgl_kernel.{name} is not provided by sglang-faser's CPU stand-in "
            "(sglang_faser.kernels.cpu); this SGLang feature needs the real sgl_kernel"
        )

    missing.__name__ = name
    return missing


def _module_getattr(module_name: str):
    def __getattr__(name: str):
        if name.startswith("__"):
            raise AttributeError(f"module {module_name!r} has no attribute {name!r}")
        return _raise_missing(name)

    return __getattr__


class _StandinLoader(importlib.abc.Loader):
    """Builds ``sgl_kernel`` and its submodules from the stand-in's op tables."""

    def create_module(self, spec):
        return None  # default module creation

    def exec_module(self, module: types.ModuleType) -> None:
        from sglang_faser.kernels import cpu

        name = module.__name__
        setattr(module, STANDIN_MARKER, True)
        module.__getattr__ = _module_getattr(name)
        if name == "sgl_kernel":
            module.__path__ = []  # a package, so that sgl_kernel.speculative resolves through us
            module.__dict__.update(cpu.CPU_OPS)
            cpu.register_torch_library_ops()
        elif name == "sgl_kernel.speculative":
            module.__dict__.update(cpu.SPECULATIVE_OPS)
        # sgl_kernel.mamba (linear-attention models only) has just the raising __getattr__


class _FallbackSglKernelFinder(importlib.abc.MetaPathFinder):
    """Last-resort finder for ``sgl_kernel``: consulted only after every real finder said no."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in STANDIN_MODULES:
            return None
        if fullname != "sgl_kernel" and not getattr(sys.modules.get("sgl_kernel"), STANDIN_MARKER, False):
            return None  # a submodule of a real sgl_kernel: not ours to serve
        return importlib.machinery.ModuleSpec(
            fullname, _StandinLoader(), is_package=(fullname == "sgl_kernel")
        )


class _TorchvisionSchemaFix(importlib.abc.MetaPathFinder):
    """Defines torchvision's ``nms``/``qnms`` schemas right before torchvision's first import."""

    done = False
    _keep_alive = None

    def find_spec(self, fullname, path=None, target=None):
        if fullname == "torchvision" and not _TorchvisionSchemaFix.done:
            _TorchvisionSchemaFix.done = True
            try:
                import torch

                if not torch.cuda.is_available():
                    lib = torch.library.Library("torchvision", "FRAGMENT")
                    lib.define("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
                    lib.define("qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
                    _TorchvisionSchemaFix._keep_alive = lib
            except Exception:  # already defined (a working torchvision build): nothing to fix
                pass
        return None  # the normal import machinery continues


def install() -> None:
    """Install both hooks once per interpreter; idempotent."""
    if not any(isinstance(f, _TorchvisionSchemaFix) for f in sys.meta_path):
        sys.meta_path.insert(0, _TorchvisionSchemaFix())
    if not any(isinstance(f, _FallbackSglKernelFinder) for f in sys.meta_path):
        sys.meta_path.append(_FallbackSglKernelFinder())


def using_standin() -> bool:
    """True when ``sgl_kernel`` resolves (or would resolve) to the stand-in, i.e. a CPU-only install."""
    module = sys.modules.get("sgl_kernel")
    if module is not None:
        return bool(getattr(module, STANDIN_MARKER, False))
    for finder in sys.meta_path:
        if isinstance(finder, _FallbackSglKernelFinder):
            continue
        find = getattr(finder, "find_spec", None)
        if find is not None and find("sgl_kernel", None) is not None:
            return False
    return True
