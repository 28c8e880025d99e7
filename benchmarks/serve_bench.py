"""Serving benchmark: each configuration as a real server in turn, the same load against each, one run.

    python benchmarks/serve_bench.py --quick          # CPU smoke run (< 15 min on 2 cores)
    python benchmarks/serve_bench.py                  # every configuration, Poisson and Gamma arrivals, 4 rates
    python benchmarks/serve_bench.py --trace t.jsonl  # replay a trace instead of generated arrivals
    python benchmarks/serve_bench.py --rates inf --max-concurrency 32  # a steady batch of 32 until the queue drains

Configurations (``benchmarks/serve/configs.py``): no speculation; fixed lengths 1, 3, 5, 7 (stock SGLang,
``--faser-mode stock``); SGLang's own ``--speculative-adaptive``; FASER (goodput policy, window 7); FASER with
frontiers of 2. Load: prompts from ``benchmarks/data`` (ShareGPT, MT-Bench and HumanEval subsets), Poisson or
bursty Gamma arrivals at several rates, streamed through ``/generate``. Per arrival process, configuration and rate
it reports output tokens/s, TTFT, TPOT and end-to-end latency (mean, p50, p99), SGLang's acceptance length
(overall and by prompt set), the lengths FASER chose and its pruned share, and ratios against no speculation and
the best fixed length of the same run. Writes ``benchmarks/results/serve_bench_{quick,full}.{json,md,png}``.
The model is the launcher's embedded default unless ``--model-path`` is given.

``--synthetic-acceptance LOW:HIGH`` (benchmark-only, for random-weight models on the GPU) makes every server accept
drafts at a per-request rate drawn from [LOW, HIGH] (``sglang_faser/engine/synthetic_acceptance.py``); its results
are labelled as synthetic and its outputs are not the model's.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import re
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.serve import metrics, report, telemetry, workload  # noqa: E402
from benchmarks.serve.configs import EXTRA, QUICK, configurations, deep_cycle_pair  # noqa: E402
from benchmarks.serve.driver import drive  # noqa: E402
from benchmarks.serve.same_code import SameCode  # noqa: E402
from sglang_faser.engine.phase_times import ENV as PHASE_TIMES_VAR  # noqa: E402
from sglang_faser.engine.step_trace import ENV_VAR as TRACE_VAR  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
# SGLang's Triton watch (srt/utils/triton_load_watch.py), from SGLANG_TRITON_SLOW_COMPILE_THRESHOLD_SECS (1 s unless
# set; scripts/gpu_bringup/remote.sh sets 0.02): each kernel compiled while the server was serving stalled its steps
SERVING_COMPILE = re.compile(r"Triton kernel '([^']+)' took ([0-9.]+) s to compile after serving started")
SERVER_READY = "The server is fired up and ready to roll"  # SGLang's line once its --warmups have run


def server_flags(flags: list[str], args) -> list[str]:
    out = list(flags) + ["--max-total-tokens", str(args.max_total_tokens), "--faser-control", "off",
                         *args.server_arg]
    if args.model_path:
        out += ["--model-path", args.model_path]
        if flags and args.draft_model_path:
            out += ["--speculative-draft-model-path", args.draft_model_path]
    return out


def run_config(name: str, flags: list[str], args, workloads: dict, progress, same_code: SameCode) -> dict:
    """Start one server, drive every (arrivals, rate) workload against it: ``{arrivals: {rate: row}}``."""
    from sglang_faser.server_process import ServerProcess

    log = log_path(args, name)
    log.parent.mkdir(parents=True, exist_ok=True)
    server = ServerProcess(server_flags(flags, args), log_path=log, env=per_config_env(name))
    rows: dict = {}
    try:
        server.start(timeout=args.server_timeout)
        same_code.check(server)
        first = next(iter(next(iter(workloads.values())).values()))
        drive(server.url, first[:2])  # warm-up, not measured
        for arrivals, by_rate in workloads.items():
            for rate, requests in by_rate.items():
                before = telemetry.read_step_phases(server.url)
                results, wall = drive(server.url, requests, progress, max_concurrency=args.max_concurrency)
                after = telemetry.read_step_phases(server.url)
                delta = telemetry.counters_delta(*(read and read["counters"] for read in (before, after)))
                row = metrics.summarise(results, wall, delta)
                row["step_phases"] = telemetry.step_phases_delta(before, after)  # per decode step; null without FASER
                row["load_avg_1m"] = os.getloadavg()[0]  # a shared machine's other work shows up here
                rows.setdefault(arrivals, {})[rate] = row
    finally:
        server.stop()
    return rows


def per_config_env(name: str) -> dict[str, str]:
    """Each configuration's servers write their own step trace (``SGLANG_FASER_STEP_TRACE=steps.jsonl``:
    ``steps_faser.jsonl``, ``steps_faser-k0.jsonl``, ...; FASER's servers only) and their own scheduler phase times
    (``SGLANG_FASER_PHASE_TIMES=phases``: ``phases_no-spec.PID``, ...; every server, ``engine/phase_times.py``), so
    that one file holds one configuration's steps."""
    out = {}
    for var in (TRACE_VAR, PHASE_TIMES_VAR):
        path = os.environ.get(var)
        if path:
            base = Path(path)
            out[var] = str(base.with_name(f"{base.stem}_{name}{base.suffix}"))
    return out


def log_path(args, name: str) -> Path:
    return args.out_dir / "logs" / f"serve_bench_{args.tag}_{name}.log"


def serving_compiles(args, names) -> dict:
    """{config: {"count", "seconds"}}: Triton compiles after the server was up, from each configuration's last
    server log (none on CPU, where nothing compiles). SGLang calls everything after its HTTP server's start
    "serving", its ``--warmups`` too (FASER's start-up warm-up compiles there on purpose), so only the lines after
    its ready line count."""
    found = {}
    for name in names:
        log = log_path(args, name)
        if log.exists():
            text = log.read_text(errors="replace")
            served = text[text.rfind(SERVER_READY):] if SERVER_READY in text else text
            times = [float(m.group(2)) for m in SERVING_COMPILE.finditer(served)]
            found[name] = {"count": len(times), "seconds": round(sum(times), 2)}
    return found


CELL_SECONDS, CELL_REQUESTS = 8.0, (32, 128)  # default cell: the requests that arrive in 8 s, 32 to 128


def requests_at(args, rate: float) -> int:
    """Requests in one (arrivals, rate) cell: ``--requests`` where given; by default as many as arrive in
    ``CELL_SECONDS`` within ``CELL_REQUESTS``, so a 16 or 64 req/s cell is not over in two seconds, too short to
    tell a few per cent on a machine that moves 10-25 % between runs."""
    if args.requests:
        return args.requests
    low, high = CELL_REQUESTS
    return low if not math.isfinite(rate) else int(min(high, max(low, round(rate * CELL_SECONDS))))


def build_workloads(args, max_new: int, rates: list[float]) -> dict:
    if args.trace:
        return {"trace": {"trace": workload.replay(args.trace, max_new)}}
    template = workload.smollm2_chat_template() if args.model_path == "smollm2" else None
    return {process: {str(rate): workload.build(requests_at(args, rate), rate, process, max_new, args.seed, args.cv,
                                                args.prompts, template, args.output_spread) for rate in rates}
            for process in args.arrivals}


def synthetic_acceptance(spec: str | None) -> dict | None:
    """Only an explicit flag turns the benchmark-only mode on; a variable left in the environment is dropped."""
    from sglang_faser.engine.synthetic_acceptance import ENV_VAR, SyntheticAcceptance

    os.environ.pop(ENV_VAR, None)
    if not spec:
        return None
    setting = SyntheticAcceptance.parse(spec)  # ValueError with the reason on a bad range
    os.environ[ENV_VAR] = setting.to_env()  # inherited by every server this run starts
    return {"low": setting.low, "high": setting.high, "seed": setting.seed}


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer configurations, rates and requests")
    parser.add_argument("--configs", nargs="*", help="names to run (default: all, or the quick set)")
    parser.add_argument("--rates", nargs="*", type=float, help="request rates (req/s; inf: all at once)")
    parser.add_argument("--max-concurrency", type=int, help="at most this many requests in flight (as SGLang's "
                        "bench_serving); with --rates inf a steady batch of this size")
    parser.add_argument("--requests", type=int, help="requests per rate (default: those arriving in "
                        f"{CELL_SECONDS:g} s, {CELL_REQUESTS[0]} to {CELL_REQUESTS[1]})")
    parser.add_argument("--max-new-tokens", type=int, default=None)
    workload.add_output_spread_flag(parser)
    parser.add_argument("--arrivals", nargs="*", choices=["poisson", "gamma"],
                        help="arrival processes (default: poisson for --quick, both otherwise)")
    parser.add_argument("--cv", type=float, default=2.0, help="Gamma arrivals: coefficient of variation (> 1 bursty)")
    parser.add_argument("--burstiness", type=float,
                        help="Gamma arrivals, vLLM's convention: shape b, CV = 1/sqrt(b) (b < 1 bursty); "
                             "overrides --cv")
    parser.add_argument("--trace", help="JSONL trace to replay: {t, prompt, max_new_tokens}")
    parser.add_argument("--prompts", choices=workload.PROMPT_SETS, default="standard",
                        help="standard: ShareGPT, MT-Bench and HumanEval subsets; mixed: half predictable (repeated "
                        "code lines), half not (random letters), so acceptance differs per request in one stream")
    parser.add_argument("--algorithm", default="EAGLE", choices=["EAGLE", "EAGLE3", "STANDALONE"])
    parser.add_argument("--window", type=int, default=7, help="FASER's and SGLang-adaptive's largest length")
    parser.add_argument("--model", choices=["embedded", "smollm2", "deep-cycles"], default="embedded",
                        help="embedded: the small pair in the repository; smollm2: SmolLM2-135M-Instruct with its "
                        "trained drafts (installed on first use), prompts in its chat template; deep-cycles: the deep "
                        "cycle pair (12-layer target, 1-layer STANDALONE draft, generated), whose drafts pass always "
                        "or never by the prompt's last token (--prompts cycles)")
    parser.add_argument("--model-path", help="any other target (overrides --model)")
    parser.add_argument("--draft-model-path")
    parser.add_argument("--max-total-tokens", type=int, default=16384)
    parser.add_argument("--server-arg", action="append", default=[], metavar="FLAG",
                        help="extra flag for every server, e.g. --server-arg=--load-format --server-arg=dummy")
    parser.add_argument("--server-timeout", type=float, default=600.0, help="seconds to wait for each server")
    parser.add_argument("--synthetic-acceptance", metavar="LOW:HIGH[:SEED]",
                        help="BENCHMARK ONLY: accept drafts at per-request rates drawn from [LOW, HIGH]")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeats", type=int, default=1,
                        help="runs of every configuration, in alternating order; each cell reports the median run")
    parser.add_argument("--tag", help="results file suffix (default: quick or full)")
    parser.add_argument("--out-dir", type=Path, default=RESULTS, help="where results and server logs go")
    args = parser.parse_args(argv)
    prompt_tag = "" if args.prompts == "standard" else f"-{args.prompts}"
    args.tag = args.tag or ("quick" if args.quick else "full") + prompt_tag + (
        f"-{args.model}" if args.model != "embedded" and not args.model_path else "")
    if args.model == "smollm2" and not args.model_path:
        args.model_path = "smollm2"  # the launcher resolves the alias and adds the matching draft
    if args.model == "deep-cycles" and not args.model_path:
        args.model_path, args.draft_model_path = deep_cycle_pair()
        args.algorithm = "STANDALONE"  # a separate draft model, not an EAGLE head
        args.server_arg = ["--dtype", "float32", *args.server_arg]
    if args.burstiness is not None:
        if args.burstiness <= 0:
            parser.error("--burstiness must be > 0")
        args.cv = args.burstiness ** -0.5
    args.arrivals = args.arrivals or (["poisson"] if args.quick else ["poisson", "gamma"])
    args.requests = args.requests or (12 if args.quick else None)  # None: requests_at's default by rate
    args.max_new_tokens = args.max_new_tokens or (32 if args.quick else 64)
    try:
        args.synthetic = synthetic_acceptance(args.synthetic_acceptance)
    except ValueError as exc:
        parser.error(f"--synthetic-acceptance: {exc}")
    return parser, args


def main(argv: list[str] | None = None) -> int:
    parser, args = parse_args(argv)
    all_configs = configurations(args.algorithm, args.window)
    names = args.configs or (list(QUICK) if args.quick else [c for c in all_configs if c not in EXTRA])
    unknown = [n for n in names if n not in all_configs]
    if unknown:
        parser.error(f"unknown configuration {unknown[0]} (known: {', '.join(all_configs)})")
    rates = args.rates or ([2.0, 16.0] if args.quick else [1.0, 4.0, 16.0, 64.0])
    workloads = build_workloads(args, args.max_new_tokens, rates)

    from tqdm import tqdm

    total = len(names) * sum(len(r) for by_rate in workloads.values() for r in by_rate.values())
    began = time.time()
    failed_configs = {}  # a server that does not start costs its rows, not the whole run
    runs: dict = {}  # (arrivals, config, rate) -> one row per repeat
    same_code = SameCode()
    with tqdm(total=total * args.repeats, desc="requests", unit="req") as progress:
        for repeat in range(args.repeats):  # alternating order: a drifting machine does not favour one config
            for name in names if repeat % 2 == 0 else names[::-1]:
                if name in failed_configs:
                    continue
                progress.set_postfix_str(f"{name} (repeat {repeat + 1}/{args.repeats})")
                try:
                    for arrivals, rows in run_config(name, all_configs[name], args, workloads, progress,
                                                            same_code).items():
                        for rate, row in rows.items():
                            runs.setdefault((arrivals, name, rate), []).append(row)
                except (RuntimeError, TimeoutError, OSError) as exc:
                    failed_configs[name] = str(exc)[-2000:]
                    print(f"\n{name}: server failed, skipped: {str(exc)[-300:]}", file=sys.stderr)
                # after every server: a run cut short (a device lease ending) keeps what it measured
                text, stem = write_results(args, workloads, runs, failed_configs, began, final=False,
                                               code=same_code.code.get("new"))
    text, stem = write_results(args, workloads, runs, failed_configs, began, final=True,
                               code=same_code.code.get("new"))
    print(text)
    print(f"wrote {stem}.{{json,md,png}}")
    return 0


def write_results(args, workloads, runs, failed_configs, began, final, code=None):
    """Medians of the repeats so far, ratios and the lossless check, into serve_bench_{tag}.{json,md(,png)}."""
    results: dict = {arrivals: {} for arrivals in workloads}
    for (arrivals, name, rate), rows in runs.items():
        if name not in failed_configs:
            results[arrivals].setdefault(name, {})[rate] = metrics.median_row(rows)
    for table in results.values():
        metrics.add_ratios(table)
        metrics.check_lossless(table)  # greedy speculation must not change a token (synthetic runs excepted)
    meta = {"machine": platform.machine(), "cpus": os.cpu_count(), "python": platform.python_version(),
            "arrivals": list(workloads), "prompts": args.prompts, "gamma_cv": args.cv,
            "requests_per_rate": {rate: len(cell) for by_rate in workloads.values() for rate, cell in by_rate.items()},
            "max_new_tokens": args.max_new_tokens, "repeats": args.repeats,
            "output_spread": args.output_spread,
            "max_concurrency": args.max_concurrency,
            "algorithm": args.algorithm, "window": args.window, "model": args.model_path or "embedded default",
            "server_args": args.server_arg, "synthetic_acceptance": args.synthetic, "failed_configs": failed_configs,
            "omp_num_threads": os.environ.get("OMP_NUM_THREADS", "unset"),  # the servers inherit it
            # the step trace is FASER's own host work (a JSON line a step): it slows FASER's servers alone
            "step_trace": os.environ.get(TRACE_VAR),
            "serving_time_compiles": serving_compiles(args, sorted({name for _, name, _ in runs})),
            "code": code,  # ``code_fingerprint`` of the sglang_faser every server ran (benchmarks/serve/same_code.py)
            "minutes": round((time.time() - began) / 60, 1), "complete": final}
    args.out_dir.mkdir(parents=True, exist_ok=True)
    stem = args.out_dir / f"serve_bench_{args.tag}"
    stem.with_suffix(".json").write_text(json.dumps({"meta": meta, "results": results}, indent=1) + "\n")
    text = report.markdown(results, meta)
    stem.with_suffix(".md").write_text(text)
    if final:
        try:
            report.plot(results, stem.with_suffix(".png"))
        except ImportError as exc:  # e.g. a GPU image without matplotlib: the JSON and the table are written
            print(f"no plot: {exc}")
    return text, stem


if __name__ == "__main__":
    sys.exit(main())
