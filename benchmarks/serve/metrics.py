"""Summaries of one (configuration, rate) run and the ratios against the baselines measured in the same run."""

from __future__ import annotations

import math

import numpy as np


def percentiles(values, qs=(50, 99)) -> dict[str, float]:
    values = np.asarray(values, dtype=float)
    if values.size == 0:
        return {f"p{q}": float("nan") for q in qs} | {"mean": float("nan")}
    return {"mean": float(values.mean())} | {f"p{q}": float(np.percentile(values, q)) for q in qs}


def summarise(results, wall_s: float, telemetry_delta: dict | None = None) -> dict:
    """One (configuration, rate) row: client-side latencies and throughput, FASER's counters over the run."""
    ok = [r for r in results if r.ok]
    tokens = sum(r.output_tokens for r in ok)
    accept = [r.accept_length for r in ok if r.accept_length is not None]
    caps = [r.mean_cap for r in ok if r.mean_cap is not None]
    by_kind = {}
    for kind in sorted({r.kind for r in ok}):
        values = [r.accept_length for r in ok if r.kind == kind and r.accept_length is not None]
        by_kind[kind] = float(np.mean(values)) if values else None
    delta = telemetry_delta or {}
    pruned_share = chosen_mean = None
    if delta.get("verified", 0) + delta.get("pruned", 0) > 0:
        pruned_share = delta["pruned"] / (delta["verified"] + delta["pruned"])
    if delta.get("requests", 0) > 0:
        chosen_mean = delta["proposed"] / delta["requests"]
    return {
        "requests": len(results),
        "failed": len(results) - len(ok),
        "output_tokens_per_s": tokens / wall_s if wall_s > 0 else 0.0,
        "ttft_s": percentiles([r.ttft for r in ok]),
        "tpot_s": percentiles([r.tpot for r in ok if r.output_tokens > 1]),
        "e2e_s": percentiles([r.e2e for r in ok]),
        "accept_length": float(np.mean(accept)) if accept else None,
        "accept_length_by_kind": by_kind,
        "mean_spec_length": float(np.mean(caps)) if caps else None,
        "chosen_length_mean": chosen_mean,  # server side: draft tokens proposed per request-step
        "chosen_length_histogram": delta.get("length_histogram"),  # [k]: request-steps given length k
        "pruned_share": pruned_share,  # verify rows skipped by early pruning / rows verified or skipped
        "wall_s": wall_s,
        "outputs": [r.text if r.ok and r.greedy else None for r in results],  # request order; dropped after check
    }


def check_lossless(table: dict[str, dict[str, dict]]) -> None:
    """Per rate: how many greedy outputs equal no-spec's for the same request (then drop the texts)."""
    for runs in table.values():
        for rate, row in runs.items():
            base = table.get("no-spec", {}).get(rate, {}).get("outputs")
            mine = row.get("outputs")
            if base is not None and mine is not None:
                pairs = [(a, b) for a, b in zip(mine, base) if a is not None and b is not None]
                row["same_output_as_no_spec"] = f"{sum(a == b for a, b in pairs)}/{len(pairs)}"
    for runs in table.values():
        for row in runs.values():
            row.pop("outputs", None)


def rate_order(rate: str) -> float:
    """Sort key of a rate label: numeric rates in order, then anything else (a replayed trace)."""
    try:
        return float(rate)
    except ValueError:
        return float("inf")


def _tpot_p50(row: dict) -> float | None:
    value = row.get("tpot_s", {}).get("p50")
    return value if value is not None and math.isfinite(value) and value > 0 else None


def add_ratios(table: dict[str, dict[str, dict]]) -> None:
    """``table[config][rate]``: add throughput and p99 ratios against no-spec, the best fixed length and the best
    configuration that is not FASER's, per rate; and the p50 time per output token against the lowest of those
    others (where the arrival rate pins every configuration's throughput, latency is what tells them apart)."""
    rates = sorted({rate for runs in table.values() for rate in runs}, key=rate_order)
    for rate in rates:
        fixed = {c: runs[rate] for c, runs in table.items() if c.startswith("fixed-") and rate in runs}
        best = max(fixed, key=lambda c: fixed[c]["output_tokens_per_s"]) if fixed else None
        others = {c: runs[rate] for c, runs in table.items() if not c.startswith("faser") and rate in runs}
        best_other = max(others, key=lambda c: others[c]["output_tokens_per_s"]) if others else None
        tpots = {c: t for c, row in others.items() if (t := _tpot_p50(row)) is not None}
        fastest = min(tpots, key=tpots.get) if tpots else None
        base = table.get("no-spec", {}).get(rate)
        for config, runs in table.items():
            if rate not in runs:
                continue
            row = runs[rate]
            tput = row["output_tokens_per_s"]
            row["best_fixed"] = best
            row["best_other"] = best_other  # the best of no speculation, fixed lengths and SGLang's adaptive
            row["vs_best_other"] = (tput / others[best_other]["output_tokens_per_s"]
                                    if best_other and others[best_other]["output_tokens_per_s"] else None)
            row["vs_no_spec"] = tput / base["output_tokens_per_s"] if base and base["output_tokens_per_s"] else None
            own = _tpot_p50(row)
            row["fastest_other"] = fastest  # the other configuration with the lowest p50 time per output token
            row["tpot_vs_fastest_other"] = tpots[fastest] / own if fastest and own else None  # > 1: this one faster
            # the "within 3 % where the repeats overlap": this cell's repeats against the best other's
            row["repeats_vs_best_other"] = (_spread_vs(row.get("repeats_tokens_per_s"),
                                                       others[best_other].get("repeats_tokens_per_s"))
                                            if best_other else None)
            row["vs_best_fixed"] = (tput / fixed[best]["output_tokens_per_s"]
                                    if best and fixed[best]["output_tokens_per_s"] else None)
            row["p99_e2e_vs_no_spec"] = (row["e2e_s"]["p99"] / base["e2e_s"]["p99"]
                                         if base and base["e2e_s"]["p99"] else None)


def _spread_vs(own: list[float] | None, other: list[float] | None) -> str | None:
    """"below" / "above" where every repeat of one cell is under / over every repeat of the other, else "overlap";
    None without repeats."""
    if not own or not other:
        return None
    if max(own) < min(other):
        return "below"
    return "above" if min(own) > max(other) else "overlap"


def median_row(rows: list[dict]) -> dict:
    """Of repeated runs of one cell, the run with the median throughput (odd counts: a real run), with every
    run's throughput kept beside it."""
    ordered = sorted(rows, key=lambda r: r["output_tokens_per_s"])
    row = dict(ordered[(len(ordered) - 1) // 2])
    row["repeats_tokens_per_s"] = [r["output_tokens_per_s"] for r in rows]
    return row
