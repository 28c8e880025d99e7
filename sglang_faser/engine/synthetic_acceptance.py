"""BENCHMARK-ONLY synthetic acceptance: drafts are accepted at a per-request rate, not by comparing tokens.

Why: real model shapes with random weights (``--load-format dummy``) measure GPU timing faithfully but accept
almost no drafts, and SGLang's own ``SGLANG_SIMULATE_ACC_LEN`` gives every request of a batch the same length, so
neither can show what per-request lengths are for. Here each request gets its own acceptance rate ``p`` drawn
once from ``[low, high]`` (a hash of its rid and the seed), and at every verify step its drafts are accepted one
by one with probability ``p`` until the first rejection, never past the chain FASER left it. The committed tokens
are the draft tokens themselves plus the target's token after the last accepted one, so the server keeps running
normally; **the outputs are not the model's**.

Off unless ``SGLANG_FASER_SYNTHETIC_ACCEPTANCE`` is set (``benchmarks/serve_bench.py --synthetic-acceptance``
sets it); the plugin then installs :func:`around_eagle_sample` and logs a warning in every scheduler. Chain drafts
only (``--speculative-eagle-topk 1``). Meant for SGLang's single-pass verify (GPU backends): with FASER's ragged
frontier passes, early pruning still follows the real tokens, so rows it skipped may be "accepted" here with KV never
computed, which only a synthetic run can tolerate. The draws stay on the device (a host read of the chains in every
verify step would stall a GPU's overlap scheduling in every speculative configuration and in none without, and
tilt the comparison towards no speculation); parsing and the draws are tested without an engine.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
from dataclasses import dataclass

import numpy as np

from sglang_faser.engine import touchpoints

ENV_VAR = "SGLANG_FASER_SYNTHETIC_ACCEPTANCE"
logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class SyntheticAcceptance:
    low: float
    high: float
    seed: int = 0

    def __post_init__(self):
        if not (0.0 <= self.low <= self.high <= 1.0):
            raise ValueError(f"need 0 <= LOW <= HIGH <= 1, got {self.low}:{self.high}")

    @classmethod
    def parse(cls, spec: str) -> SyntheticAcceptance:
        """``LOW:HIGH`` or ``LOW:HIGH:SEED``, e.g. ``0.3:0.95``."""
        parts = spec.split(":")
        if len(parts) not in (2, 3):
            raise ValueError(f"expected LOW:HIGH[:SEED], got {spec!r}")
        try:
            low, high, seed = float(parts[0]), float(parts[1]), int(parts[2]) if len(parts) == 3 else 0
        except ValueError:
            raise ValueError(f"expected LOW:HIGH[:SEED] with numbers, got {spec!r}") from None
        return cls(low, high, seed)

    def to_env(self) -> str:
        return json.dumps({"low": self.low, "high": self.high, "seed": self.seed})

    @classmethod
    def from_env(cls) -> SyntheticAcceptance | None:
        raw = os.environ.get(ENV_VAR)
        if not raw:
            return None
        try:
            fields = json.loads(raw)
            return cls(float(fields["low"]), float(fields["high"]), int(fields.get("seed", 0)))
        except (ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"{ENV_VAR} must be JSON {{low, high, seed}}: {exc}") from None

    def rate(self, rid: str) -> float:
        """The request's acceptance rate: fixed for its lifetime, the same in every process."""
        digest = hashlib.sha256(f"{self.seed}:{rid}".encode()).digest()
        return self.low + (self.high - self.low) * (int.from_bytes(digest[:8], "little") / 2**64)

    @staticmethod
    def draw(rates, chain_lengths, longest: int, generator):
        """Accepted drafts per request (tensors on one device, int64): leading successes of Bernoulli(rate)
        trials, at most the chain length; ``longest``: the longest chain the layout holds (a host number, so
        nothing waits for the device)."""
        import torch

        trials = torch.rand((len(rates), max(longest, 1)), generator=generator, device=rates.device)
        leading = (trials < rates[:, None]).to(torch.int64).cumprod(dim=1).sum(dim=1)
        return torch.minimum(leading, chain_lengths.to(torch.int64))


def around_eagle_sample(original, verify_input, batch, logits_output, *args, **kwargs):
    """AROUND ``eagle_utils.eagle_sample``: keep its shapes, replace what it accepted by the synthetic draw."""
    predict, accept_lens, accept_index = original(verify_input, batch, logits_output, *args, **kwargs)
    bs = accept_lens.shape[0]
    chain = touchpoints.verify_chain(verify_input, batch, logits_output, bs) if bs else None
    if chain is None:
        return predict, accept_lens, accept_index
    import torch

    width, next_token, candidates, target, rids = chain
    device = predict.device
    setting, generator, rate = _state(device)
    chains = (next_token != -1).to(torch.int64).cumprod(dim=1).sum(dim=1).clamp(max=width - 1)
    rates = touchpoints.host_to_device([rate(rid) for rid in rids], device, dtype=np.float32)
    accepted = setting.draw(rates, chains, width - 1, generator)

    positions = torch.arange(width, device=predict.device)
    rows = torch.arange(bs, device=predict.device)
    candidates, target = candidates.to(predict.dtype), target.to(predict.dtype)
    drafts_after = torch.cat([candidates[:, 1:], candidates[:, :1]], dim=1)  # [j]: the draft at node j + 1
    grid = predict.view(bs, width)
    grid.copy_(torch.where(positions[None, :] < accepted[:, None], drafts_after, grid))
    grid[rows, accepted] = target[rows, accepted]  # the target's token after the last accepted draft
    index_width = accept_index.shape[1]
    slots = positions[:index_width]
    new_index = torch.where(slots[None, :] <= accepted[:, None], rows[:, None] * width + slots[None, :], -1)
    accept_index.copy_(new_index.to(accept_index.dtype))
    return predict, (accepted + 1).to(accept_lens.dtype), accept_index


_STATE: tuple | None = None
RATES_CACHED = 4096  # requests whose rate is kept: a hash a request, not one a request every verify step


def _state(device):
    """The setting, a generator on ``device``, seeded alike in every process (the same draws on every
    tensor-parallel rank), and the setting's ``rate`` cached by rid."""
    global _STATE
    if _STATE is None:
        import torch

        setting = SyntheticAcceptance.from_env()
        _STATE = (setting, torch.Generator(device=device).manual_seed(setting.seed),
                  functools.lru_cache(maxsize=RATES_CACHED)(setting.rate))
    return _STATE


def install() -> bool:
    """Hook SGLang's verify sampling when the variable is set (plugin start-up, every process)."""
    setting = SyntheticAcceptance.from_env()
    if setting is None:
        return False
    touchpoints.hook_eagle_sample(around_eagle_sample)
    logger.warning("SYNTHETIC ACCEPTANCE ON (benchmark only): drafts accepted at per-request rates in [%s, %s]; "
                   "outputs are not the model's", setting.low, setting.high)
    return True
