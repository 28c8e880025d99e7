"""Small forward passes on one intra-op thread where the CPU stand-in serves.

A forward pass of a few tokens (a decode step of a small batch, a draft forward, a short verify pass) is hundreds
of small ops, each too short to gain from a second intra-op thread: every parallel region pays its thread sync, and
on a machine of few cores shared with the server's other processes (tokenizer manager, detokenizer, the HTTP
client) a region whose other thread is descheduled waits for it. Measured on the 2-core CPU machine (embedded pair,
mixed prompts, 64-token requests, servers up at once, requests alternating between them; HISTORY.md's forty-fifth
session; one run each, 8-16 alternating requests): one request at a time, no speculation 5.56 -> 5.28 ms a token
and FASER 6.13 -> 5.58 with forwards of up to 16 tokens single-threaded; 8 requests in flight, no speculation 1.32
-> 1.27 and FASER 1.79 -> 1.42 (up to 64 tokens); 32 in flight, 0.96 -> 0.93 and 1.08 -> 0.98 (up to 32).
Everything single-threaded (``OMP_NUM_THREADS=1``) was as fast at one request but 20 % slower at 32 (0.78 against
0.62): prefills and large passes do gain from the second thread, so only passes of at most ``SMALL_FORWARD_TOKENS``
tokens run on one.
``SGLANG_FASER_CPU_SMALL_FORWARD_TOKENS`` overrides the bound (0: every pass keeps the process's thread count).
"""

from __future__ import annotations

import os

ENV_VAR = "SGLANG_FASER_CPU_SMALL_FORWARD_TOKENS"
SMALL_FORWARD_TOKENS = 32


class ForwardThreads:
    """Sets torch's intra-op threads before each forward pass: one for a pass of at most ``small_tokens`` tokens,
    the process's own count (read at the first pass, once SGLang has set it up) otherwise; only on a change."""

    def __init__(self, small_tokens: int = SMALL_FORWARD_TOKENS):
        if small_tokens < 0:
            raise ValueError(f"{ENV_VAR} must be >= 0, got {small_tokens}")
        self.small_tokens = small_tokens
        self.full: int | None = None  # the process's thread count
        self.current: int | None = None

    @classmethod
    def from_env(cls) -> ForwardThreads:
        raw = os.environ.get(ENV_VAR)
        try:
            return cls(SMALL_FORWARD_TOKENS if raw in (None, "") else int(raw))
        except ValueError as exc:
            raise ValueError(f"{ENV_VAR}={raw!r}: expected a whole number of tokens >= 0") from exc

    def before(self, tokens: int) -> None:
        import torch

        if self.full is None:
            self.full = self.current = torch.get_num_threads()
        if self.full <= 1 or not self.small_tokens:
            return
        want = 1 if tokens <= self.small_tokens else self.full
        if want != self.current:
            torch.set_num_threads(want)
            self.current = want
