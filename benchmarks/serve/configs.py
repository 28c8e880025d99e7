"""The server configurations the benchmarks compare, as launcher flags (shared by serve_bench and spec_lengths_cpu).

* ``no-spec``: no ``--speculative-algorithm`` at all;
* ``no-spec-sync``: the same with SGLang's non-overlap scheduler loop (``--disable-overlap-schedule``), the loop
  every speculative server runs on CPU: how much of a gap to ``no-spec`` is the loop (not part of the default set);
* ``fixed-k``: stock SGLang speculative decoding with k draft steps, chain drafts (``--faser-mode stock``);
* ``sglang-adaptive``: SGLang's own ``--speculative-adaptive`` over the same window, no FASER worker;
* ``faser``: FASER's goodput policy choosing each request's length inside the window;
* ``faser-48``: ``faser`` with SGLang's speculative cap of 48 running requests (``--max-running-requests 48``),
  which FASER's launcher lifts where no CUDA graph is captured (not part of the default set);
* ``faser-exact``: ``faser`` with ``--faser-uniform-margin 0``: the per-request optimum even where it expects
  little more than one length for the batch (not part of the default set);
* ``faser-frontier-N``: the same, verifying in frontiers of N draft positions (early pruning);
* ``faser-warm``: ``faser`` with the start-up warm-up (``--faser-warmup on``, off on CPU by default): its costs
  measured before the first request instead of by a start-up sweep of live ones (not part of the default set);
* ``faser-eager-prefill``: ``faser`` with ``--faser-lazy-prefill off``: every prefill runs the draft model, also
  while decode steps are parked (not part of the default set);
* ``faser-k0``: the FASER worker with every length 0 (``--faser-mode off``): what a step without speculation
  costs inside a speculative server, against ``no-spec`` (not part of the default set; without the start-up
  warm-up, whose other depths it never runs: it starts as fast as ``no-spec``, which compiles at first use too);
* ``faser-fixed-k``: the FASER worker holding every length at k (``--faser-mode fixed``): what FASER's own step
  costs at stock SGLang's shapes, against ``fixed-k`` (not part of the default set).
"""

from __future__ import annotations


def spec_flags(algorithm: str, steps: int, *extra: str) -> list[str]:
    """Chain speculation with ``steps`` draft steps (topk 1, steps + 1 verified tokens)."""
    return ["--speculative-algorithm", algorithm, "--speculative-num-steps", str(steps),
            "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", str(steps + 1), *extra]


FIXED = (1, 3, 5, 7)  # the stock fixed lengths compared (and FASER's worker held at each, on request)


def configurations(algorithm: str = "EAGLE", window: int = 7, fixed=FIXED, adaptive: bool = True,
                   frontiers=(2,)) -> dict[str, list[str]]:
    configs: dict[str, list[str]] = {"no-spec": [], "no-spec-sync": ["--disable-overlap-schedule"]}
    configs.update({f"fixed-{k}": spec_flags(algorithm, k, "--faser-mode", "stock") for k in fixed})
    if adaptive:
        configs["sglang-adaptive"] = spec_flags(algorithm, window, "--faser-mode", "stock", "--speculative-adaptive")
    configs["faser"] = spec_flags(algorithm, window)
    configs["faser-48"] = spec_flags(algorithm, window, "--max-running-requests", "48")
    configs["faser-exact"] = spec_flags(algorithm, window, "--faser-uniform-margin", "0")
    for size in frontiers:
        configs[f"faser-frontier-{size}"] = spec_flags(algorithm, window, "--faser-frontier-size", str(size))
    configs["faser-warm"] = spec_flags(algorithm, window, "--faser-warmup", "on")
    configs["faser-eager-prefill"] = spec_flags(algorithm, window, "--faser-lazy-prefill", "off")
    configs["faser-k0"] = spec_flags(algorithm, window, "--faser-mode", "off", "--faser-warmup", "off")
    configs.update({f"faser-fixed-{k}": spec_flags(algorithm, window, "--faser-mode", "fixed", "--faser-fixed-len",
                                                    str(k)) for k in fixed})
    return configs


# run only when asked for by name
EXTRA = ("no-spec-sync", "faser-48", "faser-exact", "faser-warm", "faser-eager-prefill", "faser-k0",
         *(f"faser-fixed-{k}" for k in FIXED))


QUICK = ("no-spec", "fixed-1", "fixed-3", "faser", "faser-frontier-2")


def deep_cycle_pair() -> tuple[str, str]:
    """(target, draft) paths of the deep cycle pair (``sglang_faser/models/tiny.py``), generated on first use: a
    STANDALONE pair, served in float32 so that greedy outputs compare token for token."""
    from sglang_faser.models.tiny import ensure_tiny_suite

    suite = ensure_tiny_suite()
    return str(suite.deep_cycle_target), str(suite.small_cycle_draft)
