"""The CPU runtime's heap setting (``kernels/cpu/allocator.py``): memory freed at the heap's top stays mapped."""

import platform
import subprocess
import sys
from pathlib import Path

import pytest

ALLOCATOR = Path(__file__).resolve().parents[2] / "sglang_faser" / "kernels" / "cpu" / "allocator.py"

# 16 MiB in 64 KiB blocks (below glibc's mmap threshold: from the heap), all freed; prints how far the heap grew and
# how much of that growth is still mapped after the frees
PROBE = f"""
import ctypes, importlib.util, sys
spec = importlib.util.spec_from_file_location("allocator", {str(ALLOCATOR)!r})
allocator = importlib.util.module_from_spec(spec); spec.loader.exec_module(allocator)
libc = ctypes.CDLL(None)
libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
class Info(ctypes.Structure):
    _fields_ = [(name, ctypes.c_int) for name in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
                 "keepcost")]
libc.mallinfo.restype = Info
if sys.argv[1] == "retain":
    assert allocator.retain_heap()
before = libc.mallinfo().arena
blocks = [libc.malloc(64 << 10) for _ in range(256)]
grown = libc.mallinfo().arena - before
for block in blocks:
    libc.free(block)
print(grown, libc.mallinfo().arena - before)
"""


def _heap_after_frees(mode: str) -> tuple[int, int]:
    out = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True, check=True).stdout
    grown, kept = (int(x) for x in out.split())
    return grown, kept


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt(M_TOP_PAD) is glibc's")
def test_freed_top_of_heap_stays_mapped_only_with_the_pad():
    grown, kept = _heap_after_frees("default")
    assert grown >= 15 << 20 and kept < 1 << 20  # glibc's default: the freed top goes back to the kernel
    grown, kept = _heap_after_frees("retain")
    assert grown >= 15 << 20 and kept >= 15 << 20  # with the pad it stays, for the next step's temporaries
