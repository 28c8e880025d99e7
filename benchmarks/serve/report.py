"""The serving benchmark's markdown table and plots, from ``results[arrivals][config][rate]`` rows."""

from __future__ import annotations

import json
from pathlib import Path

from .metrics import rate_order


def _fmt(value, pattern: str = "{:.2f}") -> str:
    return "-" if value is None else pattern.format(value)


def accept_length(row: dict) -> str:
    """SGLang's tokens per verify step, with each prompt kind's where the workload has several (the mixed prompts:
    how differently its kinds accept is what per-request lengths can exploit)."""
    kinds = {kind: value for kind, value in (row.get("accept_length_by_kind") or {}).items() if value is not None}
    overall = _fmt(row["accept_length"])
    if len(kinds) < 2:
        return overall
    return f"{overall} ({', '.join(f'{kind} {value:.2f}' for kind, value in sorted(kinds.items()))})"


def chosen_length(row: dict):
    """FASER's mean length per request-step: the server's counters, else the per-request histograms."""
    return row.get("chosen_length_mean") if row.get("chosen_length_mean") is not None else row.get("mean_spec_length")


def markdown(results: dict, meta: dict) -> str:
    title = "# Serving benchmark"
    if meta.get("synthetic_acceptance"):
        title += " — SYNTHETIC ACCEPTANCE (benchmark-only mode; outputs are not the model's)"
    failed = meta.get("failed_configs") or {}
    lines = [title, "", f"`{json.dumps({k: v for k, v in meta.items() if k != 'failed_configs'})}`", ""]
    lines += [f"**{name}: the server failed, no rows** ({reason.splitlines()[0][:200]})" for name, reason in failed.items()]
    compiles = {name: c for name, c in (meta.get("serving_time_compiles") or {}).items() if c["count"]}
    if compiles:
        found = ", ".join(f"{name} {c['count']} ({c['seconds']:.2f} s)" for name, c in compiles.items())
        lines += [f"Triton compiles after the server was up (each configuration's last server; they stall its "
                  f"steps): {found}", ""]
    if meta.get("step_trace"):
        lines += ["**FASER's servers wrote a step trace** (`SGLANG_FASER_STEP_TRACE`): its host work slowed them "
                  "alone, so FASER's figures here understate it.", ""]
    lines += regret(results)
    for arrivals, table in results.items():
        for rate in sorted({r for runs in table.values() for r in runs}, key=rate_order):
            lines += [f"## {arrivals} arrivals, rate {rate} req/s", "",
                      "| config | out tok/s | vs no-spec | vs best fixed | TTFT p50 / p99 s | TPOT p50 / p99 ms "
                      "| e2e mean / p50 / p99 s | accept len | chosen len | pruned share | same output as no-spec | failed |",
                      "|---|---|---|---|---|---|---|---|---|---|---|---|"]
            for config, runs in table.items():
                row = runs.get(rate)
                if row is None:
                    continue
                ttft, tpot, e2e = row["ttft_s"], row["tpot_s"], row["e2e_s"]
                lines.append(
                    f"| {config} | {row['output_tokens_per_s']:.1f} | {_fmt(row.get('vs_no_spec'), '{:.2f}x')} | "
                    f"{_fmt(row.get('vs_best_fixed'), '{:.2f}x')} | {ttft['p50']:.3f} / {ttft['p99']:.3f} | "
                    f"{tpot['p50'] * 1e3:.1f} / {tpot['p99'] * 1e3:.1f} | "
                    f"{e2e['mean']:.2f} / {e2e['p50']:.2f} / {e2e['p99']:.2f} | {accept_length(row)} | "
                    f"{_fmt(chosen_length(row))} | {_fmt(row['pruned_share'])} | "
                    f"{row.get('same_output_as_no_spec', '-')} | {row['failed']} |")
            best = next((runs[rate].get("best_fixed") for runs in table.values() if rate in runs), None)
            lines += ["", f"best fixed length here: {best or '- (none run)'}", ""]
    lines += ["accept len: SGLang's tokens per verify step (bonus included), mean over requests (in brackets each "
              "prompt kind's, where there are several); chosen len: draft "
              "tokens FASER proposed per request-step (FASER configurations); pruned share: verify rows skipped by "
              "early pruning. Ratios are output tokens/s against configurations measured in the same run; the "
              "regret table's TPOT columns are the lowest p50 time per output token among the others over FASER's "
              "(above 1x: FASER's tokens come faster).", ""]
    return "\n".join(lines)


def regret(results: dict) -> list[str]:
    """FASER against the best configuration that is not FASER's, per arrival process and rate: throughput, its
    repeats against the best other's (all below, all above, or overlapping: the issue allows 3 % below where they
    overlap), and the p50 time per output token against the other with the lowest (above 1x: FASER's tokens come
    faster); with ``faser-k0`` run, also what a step without speculation costs inside FASER's worker (its
    throughput against no-spec)."""
    faser = sorted({c for table in results.values() for c in table if c.startswith("faser") and c != "faser-k0"})
    if not faser:
        return []
    k0 = any("faser-k0" in table for table in results.values())
    head = (faser + ["best other"] + [f"{c} repeats" for c in faser] + [f"{c} TPOT" for c in faser]
            + ["lowest TPOT other"]
            + (["faser-k0 vs no-spec"] if k0 else []))
    lines = ["## FASER against the best other configuration (same run)", "",
             "| arrivals, rate | " + " | ".join(head) + " |", "|---" * (len(head) + 1) + "|"]
    for arrivals, table in results.items():
        for rate in sorted({r for runs in table.values() for r in runs}, key=rate_order):
            cells = [_fmt(table.get(c, {}).get(rate, {}).get("vs_best_other"), "{:.2f}x") for c in faser]
            cells.append(next((runs[rate].get("best_other") for runs in table.values() if rate in runs), None) or "-")
            cells += [table.get(c, {}).get(rate, {}).get("repeats_vs_best_other") or "-" for c in faser]
            cells += [_fmt(table.get(c, {}).get(rate, {}).get("tpot_vs_fastest_other"), "{:.2f}x") for c in faser]
            cells.append(next((runs[rate].get("fastest_other") for runs in table.values() if rate in runs), None)
                         or "-")
            if k0:
                cells.append(_fmt(table.get("faser-k0", {}).get(rate, {}).get("vs_no_spec"), "{:.2f}x"))
            lines.append(f"| {arrivals} {rate} | " + " | ".join(cells) + " |")
    return lines + [""]


def plot(results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(results), 3, figsize=(15, 4 * len(results)), squeeze=False)
    for row_axes, (arrivals, table) in zip(axes, results.items()):
        for config, runs in table.items():
            rates = sorted(runs, key=rate_order)
            xs = [rate_order(r) if rate_order(r) != float("inf") else 0.0 for r in rates]
            row_axes[0].plot(xs, [runs[r]["output_tokens_per_s"] for r in rates], marker="o", label=config)
            row_axes[1].plot(xs, [runs[r]["e2e_s"]["p99"] for r in rates], marker="o", label=config)
            lengths = [chosen_length(runs[r]) for r in rates]
            if any(v is not None for v in lengths):
                row_axes[2].plot(xs, [v if v is not None else float("nan") for v in lengths], marker="o",
                                 label=config)
        titles = ("output tokens/s", "p99 end-to-end latency (s)", "mean chosen length (FASER)")
        for ax, title in zip(row_axes, titles):
            if all(0 < x < float("inf") for line in ax.lines for x in line.get_xdata()):
                ax.set_xscale("log", base=2)
            ax.set_xlabel("request rate (req/s)")
            ax.set_title(f"{title}, {arrivals} arrivals")
            ax.grid(alpha=0.3)
        row_axes[0].legend(fontsize=7)
        if row_axes[2].lines:
            row_axes[2].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
