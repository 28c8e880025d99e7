"""Start-up profile of the target's verify cost with real forward passes (the cost model's prior).

The goodput policy needs ``verify_ms(requests, rows)`` before the first real step, and it must be this machine's
cost, not a guess. Before the scheduler serves anything, the FASER worker runs real TARGET_VERIFY passes of the
target model over a grid of batch sizes, rows per request and context lengths, with dummy inputs: every row
writes its K/V into
slot 0, the KV pool's reserved padding slot, and reads the prefix through request slot 0, so no live state is
touched (the same trick SGLang's graph runners use when they capture). The samples become the cost model's
profile prior; online step times refine it from the first real step on (``StepCostModel``). Where the start-up
warm-up runs (``spec/warmup.py``), its real steps are the prior instead and this profile does not run: on a GPU
eager passes are launch-bound (a flat 26 ms a pass on an H200, against 5.5 ms for a graph-replayed batch-1 step).

The draft model's cost is learned online only: a draft step needs the draft's recurrent state (EAGLE hidden
states), which a dummy batch cannot provide faithfully.
"""

from __future__ import annotations

import logging
import statistics
import time

import torch

from sglang_faser.engine import touchpoints as sgl

logger = logging.getLogger(__name__)

BATCH_SIZES = (1, 2, 4, 8, 16, 32)
PREFIXES = (32, 256)  # context each profiled request attends to: attention's cost grows with it


def profile_verify(runner, window: int, repeats: int = 3, batch_sizes=BATCH_SIZES, prefixes=PREFIXES):
    """[(requests, rows, context tokens, ms)] for real target verify passes; rows per request in {1, 2, ...,
    window + 1}, contexts of ``prefixes`` tokens per request."""
    device = sgl.runner_device(runner)
    widths = sorted({1, 2, max(1, (window + 1) // 2), window + 1})
    samples = []
    with torch.no_grad():
        for bs in batch_sizes:
            for width in widths:
                for prefix in prefixes:
                    times = []
                    for _ in range(repeats + 1):  # the first run warms caches and is dropped
                        batch = _dummy_verify_batch(runner, bs, width, window, prefix, device)
                        _sync(device)
                        start = time.perf_counter()
                        sgl.run_model(runner, batch)
                        _sync(device)
                        times.append((time.perf_counter() - start) * 1e3)
                    samples.append((bs, bs * width, bs * prefix, statistics.median(times[1:])))
    return samples


def _sync(device) -> None:
    """Wait for the device: on a GPU a pass returns when it is launched, and timing launches fitted a flat 14 ms
    verify on an H200 whatever the tokens (``benchmarks/results/gpu/README.md``)."""
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def _dummy_verify_batch(runner, bs: int, width: int, window: int, prefix: int, device):
    rows = bs * width
    seq_lens = torch.full((bs,), prefix, dtype=torch.int64, device=device)
    spec_info = sgl.eagle_verify_input(
        topk=1, draft_token_num=width, spec_steps=window, capture_hidden_mode=sgl.capture_full()
    )
    return sgl.forward_batch(
        forward_mode=sgl.target_verify_mode(),
        batch_size=bs,
        input_ids=torch.zeros(rows, dtype=torch.int64, device=device),
        req_pool_indices=torch.zeros(bs, dtype=torch.int64, device=device),
        seq_lens=seq_lens,
        seq_lens_cpu=seq_lens.cpu(),
        out_cache_loc=torch.zeros(rows, dtype=torch.int64, device=device),
        seq_lens_sum=bs * prefix,
        positions=(prefix + torch.arange(width, device=device)).repeat(bs),
        spec_algorithm=sgl.runner_spec_algorithm(runner),
        spec_info=spec_info,
        capture_hidden_mode=sgl.capture_full(),
        return_logprob=False,
    )


def seed_cost_model(cost, runner, window: int, on_samples=None) -> str:
    """Profile and feed the prior into ``cost`` (and the samples to ``on_samples``, the step trace's); returns a
    one-line summary for the log and telemetry."""
    try:
        samples = profile_verify(runner, window)
    except Exception as exc:  # an unusual backend: keep the default prior, say so
        logger.warning("FASER: start-up verify profile failed (%s); the cost model starts from its default", exc)
        return f"failed: {exc}"
    if on_samples is not None:
        on_samples(samples)
    for bs, rows, context, ms in samples:
        cost.add_profile_sample("verify", bs, rows, ms, context=context)
    cost.refit()
    summary = f"{len(samples)} verify passes, coef={[round(float(c), 4) for c in cost.verify_coef]}"
    logger.info("FASER start-up profile: %s", summary)
    return summary
