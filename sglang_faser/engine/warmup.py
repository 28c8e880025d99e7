"""The start-up warm-up (spec/warmup.py says why and what): SGLang's ``--warmups faser_depths`` entry.

SGLang runs its ``--warmups`` entries in the HTTP server's start-up, before the server answers a request; this
one reads the scheduler's largest batch and FASER's window from ``/server_info``'s internal state, then sends the
warm-up's request groups one after another and waits for each to finish. The launcher adds it by default where a
GPU serves (``--faser-warmup``); on CPU nothing compiles at serving time and the warm-up is off unless asked for.
"""

from __future__ import annotations

import logging
import time

from sglang_faser.engine import touchpoints as sgl
from sglang_faser.spec import warmup as plan

logger = logging.getLogger(__name__)

NAME = "faser_depths"


async def run(disaggregation_mode: str, tokenizer_manager) -> None:
    try:
        await _run(disaggregation_mode, tokenizer_manager)
    except Exception:  # a speed-up only: a server that cannot warm up still serves, and says why
        logger.exception("FASER warm-up failed; serving without it (first uses of a depth may stall)")


async def _run(disaggregation_mode: str, tokenizer_manager) -> None:
    max_running, faser = await sgl.serving_limits(tokenizer_manager)
    if not faser:
        logger.warning("FASER warm-up: no FASER worker serves (stock SGLang); nothing to warm up")
        return
    window = int(faser["window"])
    sizes = plan.batch_sizes(int(max_running or plan.DEFAULT_MAX_BATCH))
    params = {"temperature": 0.0, "max_new_tokens": plan.new_tokens(window), "ignore_eos": True}
    began = time.perf_counter()
    for size in sizes:
        rids = [f"{plan.RID_PREFIX}{size}-{i}" for i in range(size)]
        texts = [f"FASER warm-up, batch {size}, request {i}:" for i in range(size)]
        await sgl.generate_batch(tokenizer_manager, disaggregation_mode, texts, rids, params)
    logger.info("FASER warm-up: depths 0..%d at batches %s in %.1f s", window, sizes, time.perf_counter() - began)


def register() -> None:
    sgl.register_warmup(NAME, run)
