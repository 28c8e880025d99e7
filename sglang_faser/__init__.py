"""sglang-faser: FASER speculative decoding built into SGLang 0.5.23.

Kept import-free on purpose: ``sglang_faser_cpu.pth`` imports ``sglang_faser.cpu_bootstrap`` at every interpreter
start, and that must not pull in torch or SGLang.
"""

__version__ = "0.1.0"
