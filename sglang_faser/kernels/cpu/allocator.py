"""The C heap of a CPU serving process kept at its high-water mark (glibc's ``M_TOP_PAD``).

The stand-in's ops are plain PyTorch: every temporary of a forward pass is allocated from glibc's heap and freed
when its op ends. glibc hands memory freed at the top of its heap back to the kernel once more than its trim
threshold lies free there, keeping only ``M_TOP_PAD`` (128 KiB by default), and grows the heap again at the next
allocation, so a step pays page faults for memory it held a moment before. On the 2-core CPU machine (embedded
pair, 48 requests of the mixed workload, 32-96 output tokens) a target verify pass took 48-64 ms, the scheduler
process faulting 330,000-440,000 pages a second, until the first requests finished, and 26-32 ms at 0-18,000 faults a
second from then on, at the same batch and context (most likely an allocation made then, which lives on, pins the
heap's top); with the pad raised, 22-34 ms at 0-8,000 faults a second from the first step. Every configuration served
a burst's first seconds at about half speed, and FASER's cost model read the slow spell as the price of whatever
depth ran in it (benchmarks/results/HISTORY.md, thirty-eighth session). The pad is address space: pages are only
backed once touched, and at most the pad stays touched and unreturned.
"""

from __future__ import annotations

import ctypes
import logging

logger = logging.getLogger(__name__)

M_TOP_PAD = -2  # glibc's mallopt parameter (malloc.h)
TOP_PAD_BYTES = 512 << 20


def retain_heap(pad: int = TOP_PAD_BYTES) -> bool:
    """Keep ``pad`` bytes at the heap's top when glibc trims it; False where the C library has no ``mallopt``."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        logger.debug("no mallopt in this C library: heap trimming left as it is")
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(M_TOP_PAD, pad))
