"""GPU bring-up only: SGLang 0.5.23's Llama/Qwen2 MLP imports its Blackwell dual-GEMM module on every CUDA device,
and that module imports ``cutlass`` (nvidia-cutlass-dsl, not carried). On Hopper the kernel is never used
(``can_use_dual_gemm`` needs SM100), so when ``cutlass`` is missing this stands in for the module with the three
names the model layer reads. Put this folder first on PYTHONPATH (``remote.sh`` does)."""

import enum
import importlib.util
import sys
import types

if importlib.util.find_spec("cutlass") is None:
    stub = types.ModuleType("sglang.kernels.ops.gemm.cutedsl_dual_gemm")

    class DualGemmQuantMode(enum.IntEnum):
        STATIC_PER_TENSOR = 0
        STATIC_PER_TOKEN = 1
        DYNAMIC_PER_TENSOR = 2
        DYNAMIC_PER_TOKEN = 3
        UNQUANT = 4

        @property
        def is_quantized(self) -> bool:
            return self is not DualGemmQuantMode.UNQUANT

        @property
        def is_dynamic(self) -> bool:
            return self in (DualGemmQuantMode.DYNAMIC_PER_TENSOR, DualGemmQuantMode.DYNAMIC_PER_TOKEN)

    def can_use_dual_gemm(*args, **kwargs) -> bool:
        return False

    def _absent(*args, **kwargs):
        raise RuntimeError("the CuTe DSL dual GEMM needs nvidia-cutlass-dsl and an SM100 GPU")

    stub.MAX_DUAL_GEMM_DECODE_TOKENS = 16
    stub.DualGemmQuantMode = DualGemmQuantMode
    stub.can_use_dual_gemm = can_use_dual_gemm
    stub.dual_gemm_swiglu = stub.dual_gemm_swiglu_fp8 = _absent
    sys.modules[stub.__name__] = stub

if importlib.util.find_spec("flash_mla") is None:
    # EAGLEWorkerV2._capture_cuda_graphs imports the FlashMLA backend on every CUDA device to list graph-capable
    # backends; its kernels (sgl-flash-mla, not carried) serve MLA models only, never Llama/Qwen2.
    def _missing(name):
        if name.startswith("__"):
            raise AttributeError(name)
        return lambda *args, **kwargs: (_ for _ in ()).throw(RuntimeError("flash_mla is not installed"))

    for name in ("flash_mla", "flash_mla.flash_mla_interface"):
        module = types.ModuleType(name)
        module.__path__ = []  # a package, so its submodule imports resolve from sys.modules
        module.__getattr__ = _missing
        sys.modules[name] = module
