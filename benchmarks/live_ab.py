"""FASER policies compared inside one server: the same process, the same stream of requests, windows in turn.

    python benchmarks/live_ab.py                                   # adaptive / fixed:1 / off at 48 in flight
    python benchmarks/live_ab.py --policies adaptive fixed:1 fixed:2 --concurrency 16 --cycles 10
    python benchmarks/live_ab.py --rate 64 --arrivals gamma        # each window one burst, as a regret-table cell

Two servers of one configuration run 10-16 % apart on this machine for as long as they live (and a fresh server
of another configuration anywhere in that range), wider than the 3 % the policy must be judged at. Here one FASER
server serves a closed loop of ``--concurrency`` requests in flight (the mixed prompts, greedy, output lengths of
``--max-new-tokens`` x [0.5, 1.5], a finished request replaced at once, so admissions and prefills come as they do
under load) while the policy is switched live (``/set_internal_state``, what ``faserctl set-policy`` sends) every
``--window`` seconds, in alternating order (A B C C B A A B C ...). A window's tokens/s is every token streamed in
it after its first ``--settle`` seconds (the switch's own steps: queued decisions, draft catch-ups); each cycle's
windows are seconds apart, so the ratio of a policy to the reference (the first ``--policies`` entry) within a
cycle has the machine's spells and the process's own speed taken out, and the median over cycles is reported with
how many cycles fell on each side. With ``--rate`` a window is instead one burst from an idle server with its
prefix cache emptied, the regret table's cell (``--requests`` mixed prompts arriving at that rate, Poisson or
Gamma), the same burst for every policy of a cycle, and its tokens/s is the burst's tokens over its wall time.
What it cannot compare: stock SGLang configurations (another process), and a policy's behaviour right after
start-up (each window starts from the state the previous policy left: adaptive's acceptance posteriors keep
learning under fixed lengths, not under ``off``).

Policies: ``adaptive``, ``off`` (length 0 for all, the worker still in place) and ``fixed:K``, each with any knobs
of its own (``adaptive,uniform_margin=0,draft_margin=0``).
Writes ``benchmarks/results/live_ab_{tag}.{json,md,png}``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path

import aiohttp
import requests

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.serve import telemetry  # noqa: E402
from benchmarks.serve.configs import spec_flags  # noqa: E402
from benchmarks.serve.driver import drive  # noqa: E402
from benchmarks.serve.workload import build, mixed_prompts, output_lengths  # noqa: E402
from control.engine_client import EngineClient  # noqa: E402
from sglang_faser.spec.config import KNOB, ConfigError, FaserConfig, Mode  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
BOOLS = {"on": True, "true": True, "off": False, "false": False}  # a bool knob's values in a policy


def policy_config(spec: str) -> FaserConfig:
    """``adaptive`` | ``off`` | ``fixed:K``, then any ``,knob=value`` (``spec/config.py``'s ``KNOBS``), as the whole
    policy the server runs: every knob not named is at its default, whatever the server was launched with (a push
    replaces the policy; ``--server-arg --faser-draft-margin=0`` lasted only until the first window's)."""
    head, *overrides = spec.split(",")
    name, _, length = head.partition(":")
    if name == "fixed" and length.isdigit():
        config = FaserConfig(mode=Mode.FIXED, fixed_len=int(length))
    elif name in ("adaptive", "off") and not length:
        config = FaserConfig(mode=Mode(name))
    else:
        raise argparse.ArgumentTypeError(f"policy must be adaptive, off or fixed:K, got {spec!r}")
    changes = {}
    for override in overrides:
        knob, _, text = override.partition("=")
        if knob not in KNOB or knob == "mode" or not text:
            raise argparse.ArgumentTypeError(f"{override!r} in {spec!r}: not knob=value of a FASER setting")
        kind = KNOB[knob].kind
        if kind == "bool":
            if text not in BOOLS:
                raise argparse.ArgumentTypeError(f"{override!r} in {spec!r}: {knob} takes on/off or true/false")
            changes[knob] = BOOLS[text]
            continue
        try:
            changes[knob] = (int if kind == "int" else float)(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{override!r} in {spec!r}: {knob} takes a number") from None
    try:
        return config.replace(**changes)
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(f"{spec!r}: {exc}") from None


def schedule(policies: list[str], cycles: int) -> list[tuple[int, str]]:
    """(cycle, policy) in the order they run: each cycle the policies in turn, every other cycle reversed."""
    return [(c, p) for c in range(cycles) for p in (policies if c % 2 == 0 else policies[::-1])]


async def _stream(session, url: str, prompt: str, max_new: int, tokens: list) -> None:
    """One greedy request; each streamed chunk's new tokens appended to ``tokens`` as (time, count)."""
    body = {"text": prompt, "stream": True,
            "sampling_params": {"temperature": 0.0, "max_new_tokens": max_new, "ignore_eos": True}}
    seen = 0
    async with session.post(url + "/generate", json=body) as response:
        response.raise_for_status()
        async for raw in response.content:
            line = raw.strip()
            if not line.startswith(b"data:") or line == b"data: [DONE]":
                continue
            done = int(json.loads(line[5:])["meta_info"]["completion_tokens"])
            tokens.append((time.perf_counter(), done - seen))
            seen = done


async def _load(url: str, concurrency: int, max_new: int, spread: float, stop: asyncio.Event, tokens: list) -> None:
    """``concurrency`` requests in flight until ``stop``; each finished one replaced by the next prompt."""
    prompts = [p for _, p, _ in mixed_prompts(n=256)]
    lengths = output_lengths(len(prompts), max_new, spread)
    turn = iter(range(10 ** 9))

    async def slot(session) -> None:
        while not stop.is_set():
            i = next(turn) % len(prompts)
            await _stream(session, url, prompts[i], lengths[i], tokens)

    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None)) as session:
        await asyncio.gather(*(slot(session) for _ in range(concurrency)))


async def _run(url: str, args) -> list[dict]:
    """Every (cycle, policy) window in turn, the policy pushed before it; a window's tokens/s as ``args`` says
    (``--rate``: one burst; otherwise the closed loop's tokens after ``--settle``)."""
    engine, version = EngineClient(url), 0

    async def switch(spec: str) -> None:
        nonlocal version
        version += 1
        await asyncio.to_thread(engine.push, policy_config(spec), version)

    tokens, stop = [], asyncio.Event()
    load = None
    await switch(args.policies[0])
    if args.rate is None:
        load = asyncio.create_task(_load(url, args.concurrency, args.max_new_tokens, args.output_spread, stop,
                                         tokens))
        await asyncio.sleep(args.warmup)  # first steps, first prompts: not measured
    else:
        await asyncio.to_thread(drive, url, _burst(args, seed=10 ** 6)[:4])  # first steps: not measured
    windows = []
    for cycle, spec in schedule(args.policies, args.cycles):
        await switch(spec)
        before = await asyncio.to_thread(telemetry.read_step_phases, url)
        began = time.perf_counter()
        if args.rate is None:
            await asyncio.sleep(args.window)
            rate = None
        else:  # the same burst for every policy of a cycle, a new one each cycle, each from a cold prefix cache
            await asyncio.to_thread(flush_prefix_cache, url)
            results, wall = await asyncio.to_thread(drive, url, _burst(args, seed=cycle))
            rate = sum(r.output_tokens for r in results if r.ok) / wall
        ended = time.perf_counter()
        after = await asyncio.to_thread(telemetry.read_step_phases, url)
        delta = telemetry.counters_delta(*(r and r["counters"] for r in (before, after))) or {}
        # on the clock a step trace's ``time`` is on too (SGLANG_FASER_STEP_TRACE), to split it by window
        epoch = time.time() - (time.perf_counter() - began)
        windows.append({"cycle": cycle, "policy": spec, "began": began, "ended": ended, "tokens_per_s": rate,
                        "epoch": [epoch, epoch + ended - began],
                        "drafts_per_request_step": delta.get("proposed", 0) / max(delta.get("requests", 0), 1),
                        "step_phases": telemetry.step_phases_delta(before, after)})
        print(f"cycle {cycle} {spec:>10}: {'' if rate is None else f'{rate:.1f} tok/s'}", flush=True)
    if load is not None:
        stop.set()
        await load
        for w in windows:
            start = w["began"] + args.settle
            w["tokens_per_s"] = sum(n for t, n in tokens if start <= t < w["ended"]) / (w["ended"] - start)
    return windows


def flush_prefix_cache(url: str) -> None:
    """Empty the server's radix cache before a burst: the first policy of a cycle would otherwise prefill that
    cycle's prompts while the later ones find them cached (in s52's runs the cold window's prefill took 2-3x the
    warm ones', a 5-12 % handicap on its tokens/s that fell on the reference policy every other cycle)."""
    response = requests.post(url + "/flush_cache", params={"timeout": 60}, timeout=90)
    response.raise_for_status()


def _burst(args, seed: int) -> list:
    """``--requests`` mixed prompts arriving at ``--rate`` (``--arrivals``), as a regret-table cell sends them."""
    return build(args.requests, args.rate, args.arrivals, args.max_new_tokens, seed=seed, prompt_set="mixed",
                 output_spread=args.output_spread)


def summarise(windows: list[dict], policies: list[str]) -> dict:
    """Per policy: median tokens/s, and per cycle its ratio to the reference policy's (median, range, sides)."""
    by = {(w["cycle"], w["policy"]): w for w in windows}
    cycles = sorted({w["cycle"] for w in windows})
    ref = policies[0]
    out = {}
    for spec in policies:
        rates = [by[(c, spec)]["tokens_per_s"] for c in cycles]
        ratios = [by[(c, spec)]["tokens_per_s"] / by[(c, ref)]["tokens_per_s"] for c in cycles]
        out[spec] = {"tokens_per_s": statistics.median(rates), "ratio": statistics.median(ratios),
                     "ratio_min": min(ratios), "ratio_max": max(ratios),
                     "above": sum(r > 1 for r in ratios), "below": sum(r < 1 for r in ratios),
                     "drafts_per_request_step": statistics.median(
                         by[(c, spec)]["drafts_per_request_step"] for c in cycles),
                     "ratios": ratios}
    return out


def write(args, windows: list[dict], summary: dict) -> Path:
    stem = args.out_dir / f"live_ab_{args.tag}"
    stem.parent.mkdir(parents=True, exist_ok=True)
    meta = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}
    stem.with_suffix(".json").write_text(json.dumps({"meta": meta, "summary": summary, "windows": windows},
                                                    indent=1))
    ref = args.policies[0]
    lines = ["# Policies inside one FASER server", "", f"`{json.dumps(meta)}`", "",
             f"| policy | tokens/s (median window) | / {ref} (median of cycles) | range | cycles above / below "
             "| drafts per request-step |", "|---|---|---|---|---|---|"]
    for spec, row in summary.items():
        lines.append(f"| {spec} | {row['tokens_per_s']:.1f} | {row['ratio']:.3f}x | {row['ratio_min']:.3f}-"
                     f"{row['ratio_max']:.3f} | {row['above']} / {row['below']} | "
                     f"{row['drafts_per_request_step']:.2f} |")
    stem.with_suffix(".md").write_text("\n".join(lines) + "\n")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.5))
    for spec in args.policies:
        ws = [w for w in windows if w["policy"] == spec]
        ax.plot([w["cycle"] for w in ws], [w["tokens_per_s"] for w in ws], "o-", label=spec)
    ax.set_xlabel("cycle")
    ax.set_ylabel("tokens/s in the window")
    ax.legend()
    fig.tight_layout()
    fig.savefig(stem.with_suffix(".png"), dpi=110)
    return stem


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--policies", nargs="+", type=str, default=["adaptive", "fixed:1", "off"],
                    help="adaptive | off | fixed:K, then any ,knob=value (adaptive,uniform_margin=0); the first is "
                    "the reference of the ratios")
    ap.add_argument("--concurrency", type=int, default=48, help="requests in flight (the closed loop)")
    ap.add_argument("--rate", type=float, help="each window one burst of --requests arriving at this rate instead")
    ap.add_argument("--arrivals", choices=["poisson", "gamma"], default="poisson")
    ap.add_argument("--requests", type=int, default=128, help="requests a burst (--rate)")
    ap.add_argument("--cycles", type=int, default=8)
    ap.add_argument("--window", type=float, default=12.0, help="seconds a policy runs in each cycle")
    ap.add_argument("--settle", type=float, default=2.0, help="seconds after a switch not counted")
    ap.add_argument("--warmup", type=float, default=20.0, help="seconds served before the first window")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--output-spread", type=float, default=0.5)
    ap.add_argument("--window-len", type=int, default=7, help="the draft window (--speculative-num-steps)")
    ap.add_argument("--max-total-tokens", type=int, default=16384, help="as serve_bench.py sets it")
    ap.add_argument("--server-arg", action="append", default=[], help="an extra launcher flag (repeatable)")
    ap.add_argument("--tag", default="run")
    ap.add_argument("--out-dir", type=Path, default=RESULTS)
    args = ap.parse_args(argv)
    for spec in args.policies:
        policy_config(spec)
    if len(set(args.policies)) != len(args.policies) or args.settle >= args.window:
        ap.error("policies must differ, and --settle be shorter than --window")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    from sglang_faser.server_process import ServerProcess

    log = args.out_dir / "logs" / f"live_ab_{args.tag}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    flags = spec_flags("EAGLE", args.window_len, "--faser-control", "off", "--max-total-tokens",
                       str(args.max_total_tokens), *args.server_arg)
    server = ServerProcess(flags, log_path=log)
    try:
        server.start()
        windows = asyncio.run(_run(server.url, args))
    finally:
        server.stop()
    summary = summarise(windows, args.policies)
    stem = write(args, windows, summary)
    print(stem.with_suffix(".md").read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
