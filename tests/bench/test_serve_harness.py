"""The serving benchmark's pure parts: arrival processes, workloads, metric maths and ratios."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks import oracle_lengths  # noqa: E402
from benchmarks.serve import metrics, workload  # noqa: E402
from benchmarks.serve.driver import Result  # noqa: E402


@pytest.mark.parametrize("process", ["poisson", "gamma"])
def test_arrivals_have_the_asked_rate_and_are_reproducible(process):
    times = workload.arrival_times(4000, rate=8.0, process=process, seed=3)
    assert np.all(np.diff(times) >= 0) and times[0] == 0
    assert 4000 / times[-1] == pytest.approx(8.0, rel=0.1)
    assert np.array_equal(times, workload.arrival_times(4000, 8.0, process, seed=3))


def test_gamma_arrivals_are_burstier_than_poisson():
    poisson = np.diff(workload.arrival_times(4000, 8.0, "poisson", seed=1))
    bursty = np.diff(workload.arrival_times(4000, 8.0, "gamma", cv=3.0, seed=1))
    assert np.std(poisson) / np.mean(poisson) == pytest.approx(1.0, rel=0.15)
    assert np.std(bursty) / np.mean(bursty) == pytest.approx(3.0, rel=0.25)


def test_infinite_rate_sends_everything_at_once_and_unknown_process_is_refused():
    assert not workload.arrival_times(5, float("inf")).any()
    with pytest.raises(ValueError, match="unknown arrival process"):
        workload.arrival_times(5, 1.0, "uniform")


def test_workload_draws_from_every_shipped_prompt_set(tmp_path):
    requests = workload.build(60, 4.0, "poisson", max_new_tokens=8, seed=0)
    assert {r.kind for r in requests} == set(workload.SETS)
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"t": 1.5, "prompt": "b"}\n{"t": 0.5, "prompt": "a", "max_new_tokens": 3}\n')
    replayed = workload.replay(trace, default_max_new_tokens=9)
    assert [(r.at, r.prompt, r.max_new_tokens) for r in replayed] == [(0.5, "a", 3), (1.5, "b", 9)]


def test_mixed_prompt_set_interleaves_predictable_and_random_requests():
    requests = workload.build(40, 4.0, "poisson", 16, seed=3, prompt_set="mixed")
    kinds = [r.kind for r in requests]
    assert set(kinds) == {"repeat", "noise"} and 10 <= kinds.count("repeat") <= 30
    repeat = next(r.prompt for r in requests if r.kind == "repeat").splitlines()
    assert len(set(repeat)) == 1 and len(repeat) == 8  # one line said eight times
    assert workload.build(40, 4.0, "poisson", 16, seed=3, prompt_set="mixed") == requests  # reproducible
    assert {r.temperature for r in requests} == {0.0}


def test_cycles_prompt_set_ends_each_prompt_on_a_token_of_its_kinds_cycle(tiny_suite):
    from transformers import AutoTokenizer

    from sglang_faser.models.tiny import CYCLE_SPLIT

    requests = workload.build(40, 4.0, "poisson", 16, seed=3, prompt_set="cycles")
    assert {r.kind for r in requests} == {"sure", "doomed"} and {r.temperature for r in requests} == {0.0}
    tok = AutoTokenizer.from_pretrained(tiny_suite.deep_cycle_target)
    for r in requests:  # the target walks the cycle of the prompt's last token; the draft is right on cycle A only
        assert (tok(r.prompt).input_ids[-1] < CYCLE_SPLIT) == (r.kind == "sure"), r.prompt


def test_mixed_temp_prompt_set_mixes_greedy_code_and_sampled_chat():
    requests = workload.build(40, 4.0, "poisson", 16, seed=3, prompt_set="mixed-temp")
    kinds = {r.kind: r.temperature for r in requests}
    assert kinds == {"repeat": 0.0, "sampled": workload.SAMPLED_TEMPERATURE}
    chat = {prompt for _, prompt in workload.load_prompts(("chat",))}
    assert all(r.prompt in chat for r in requests if r.kind == "sampled")


def test_summary_and_ratios():
    results = [Result("chat", True, ttft=0.1, e2e=1.1, output_tokens=11, accept_length=2.0, mean_cap=1.5),
               Result("code", True, ttft=0.3, e2e=2.3, output_tokens=21, accept_length=3.0, mean_cap=2.5),
               Result("chat", False, error="HTTP 500")]
    row = metrics.summarise(results, wall_s=4.0, telemetry_delta={"verified": 30, "pruned": 10})
    assert row["failed"] == 1 and row["output_tokens_per_s"] == pytest.approx(8.0)
    assert row["tpot_s"]["mean"] == pytest.approx(0.1) and row["e2e_s"]["p50"] == pytest.approx(1.7)
    assert row["accept_length_by_kind"] == {"chat": 2.0, "code": 3.0} and row["pruned_share"] == pytest.approx(0.25)
    table = {"no-spec": {"1": {"output_tokens_per_s": 10.0, "e2e_s": {"p99": 2.0}, "tpot_s": {"p50": 0.012}}},
             "fixed-1": {"1": {"output_tokens_per_s": 8.0, "e2e_s": {"p99": 3.0}, "tpot_s": {"p50": 0.009}}},
             "fixed-3": {"1": {"output_tokens_per_s": 12.0, "e2e_s": {"p99": 1.0}, "tpot_s": {"p50": float("nan")}}},
             "sglang-adaptive": {"1": {"output_tokens_per_s": 13.0, "e2e_s": {"p99": 1.0}}},
             "faser": {"1": {"output_tokens_per_s": 15.0, "e2e_s": {"p99": 1.0}, "tpot_s": {"p50": 0.010},
                             "repeats_tokens_per_s": [15.0, 14.0, 16.0]}}}
    table["sglang-adaptive"]["1"]["repeats_tokens_per_s"] = [13.0, 12.0, 14.5]
    table["fixed-3"]["1"]["repeats_tokens_per_s"] = [11.5, 11.0, 11.8]
    metrics.add_ratios(table)
    faser = table["faser"]["1"]
    assert faser["best_fixed"] == "fixed-3"
    assert faser["vs_best_fixed"] == pytest.approx(1.25) and faser["vs_no_spec"] == pytest.approx(1.5)
    assert faser["p99_e2e_vs_no_spec"] == pytest.approx(0.5)
    assert faser["best_other"] == "sglang-adaptive" and faser["vs_best_other"] == pytest.approx(15 / 13)
    # latency: against the other with the lowest p50 time per output token (a NaN or missing one is no candidate)
    assert faser["fastest_other"] == "fixed-1" and faser["tpot_vs_fastest_other"] == pytest.approx(0.9)
    assert table["fixed-3"]["1"]["tpot_vs_fastest_other"] is None
    from benchmarks.serve.report import regret

    assert "| poisson 1 | 1.15x | sglang-adaptive | overlap | 0.90x | fixed-1 |" in regret({"poisson": table})
    # every repeat below (or above) every repeat of the best other; no repeats: not told
    assert table["fixed-3"]["1"]["repeats_vs_best_other"] == "below"
    table["sglang-adaptive"]["1"]["repeats_tokens_per_s"] = [13.0, 12.0, 13.5]
    metrics.add_ratios(table)
    assert table["faser"]["1"]["repeats_vs_best_other"] == "above"
    assert table["no-spec"]["1"]["repeats_vs_best_other"] is None


def test_the_table_shows_each_prompt_kinds_acceptance_where_there_are_several():
    from benchmarks.serve.report import markdown

    mixed = metrics.summarise([Result("noise", True, ttft=0.1, e2e=1.0, output_tokens=4, accept_length=1.5),
                               Result("repeat", True, ttft=0.1, e2e=1.0, output_tokens=4, accept_length=2.5)], 2.0)
    one_kind = metrics.summarise([Result("chat", True, ttft=0.1, e2e=1.0, output_tokens=4, accept_length=2.0)], 2.0)
    text = markdown({"poisson": {"fixed-1": {"2.0": mixed}, "fixed-3": {"2.0": one_kind}}}, {})
    assert "| 2.00 (noise 1.50, repeat 2.50) |" in text
    assert "| 2.00 |" in text and "chat 2.00" not in text


def test_repeats_report_the_median_run():
    rows = [{"output_tokens_per_s": v, "ttft_s": v} for v in (9.0, 7.0, 8.0)]
    row = metrics.median_row(rows)
    assert row["output_tokens_per_s"] == 8.0 and row["ttft_s"] == 8.0  # one real run, not a mix of runs
    assert row["repeats_tokens_per_s"] == [9.0, 7.0, 8.0]


def test_counter_deltas_give_chosen_lengths_and_pruned_share():
    from benchmarks.serve.telemetry import counters_delta

    before = {"steps": 5, "requests": 10, "proposed": 20, "verified": 30, "pruned": 0, "length_histogram": [1, 2]}
    after = {"steps": 9, "requests": 30, "proposed": 80, "verified": 90, "pruned": 30,
             "length_histogram": [1, 4, 0, 16]}
    delta = counters_delta(before, after)
    assert delta["length_histogram"] == [0, 2, 0, 16] and delta["requests"] == 20
    assert counters_delta(None, after) is None and counters_delta(before, None) is None
    row = metrics.summarise([Result("chat", True, ttft=0.1, e2e=1.0, output_tokens=4)], 1.0, delta)
    assert row["chosen_length_mean"] == pytest.approx(3.0)  # 60 drafts over 20 request-steps
    assert row["pruned_share"] == pytest.approx(30 / 90) and row["chosen_length_histogram"] == [0, 2, 0, 16]
    assert metrics.summarise([], 1.0, None)["pruned_share"] is None


def test_configurations_map_to_launcher_flags():
    from benchmarks.serve.configs import EXTRA, QUICK, configurations

    configs = configurations("EAGLE", window=7)
    assert list(configs) == ["no-spec", "no-spec-sync", "fixed-1", "fixed-3", "fixed-5", "fixed-7",
                             "sglang-adaptive", "faser", "faser-48", "faser-exact", "faser-frontier-2", "faser-warm",
                             "faser-eager-prefill", "faser-k0", "faser-fixed-1", "faser-fixed-3", "faser-fixed-5",
                             "faser-fixed-7"]
    # the worker at length 0: a k = 0 step's cost (no warm-up of depths it never runs)
    assert configs["faser-k0"][-4:] == ["--faser-mode", "off", "--faser-warmup", "off"]
    # FASER's worker held at a stock length, inside the same window as the adaptive server: its own path's cost
    assert configs["faser-fixed-3"][-4:] == ["--faser-mode", "fixed", "--faser-fixed-len", "3"]
    assert configs["faser-warm"][-2:] == ["--faser-warmup", "on"]  # its costs measured before the first request
    assert configs["faser-48"][-2:] == ["--max-running-requests", "48"]  # SGLang's speculative cap, kept
    assert configs["faser-eager-prefill"][-2:] == ["--faser-lazy-prefill", "off"]  # every prefill runs the draft
    assert set(EXTRA) == {"no-spec-sync", "faser-48", "faser-exact", "faser-warm", "faser-eager-prefill", "faser-k0",
                          *(f"faser-fixed-{k}" for k in (1, 3, 5, 7))}
    assert configs["faser-exact"][-2:] == ["--faser-uniform-margin", "0"]  # the per-request optimum, no margin
    assert set(QUICK) <= set(configs) and configs["no-spec"] == []
    assert configs["no-spec-sync"] == ["--disable-overlap-schedule"]  # the loop a speculative server runs on CPU
    fixed3 = configs["fixed-3"]
    assert fixed3[fixed3.index("--speculative-num-draft-tokens") + 1] == "4"
    assert fixed3[fixed3.index("--faser-mode") + 1] == "stock"
    assert "--speculative-adaptive" in configs["sglang-adaptive"] and "--faser-mode" not in configs["faser"]
    assert configs["faser-frontier-2"][-2:] == ["--faser-frontier-size", "2"]


def test_report_orders_rates_numerically_and_labels_synthetic_runs(tmp_path):
    from benchmarks.serve import report

    row = metrics.summarise([Result("chat", True, ttft=0.1, e2e=1.0, output_tokens=4, accept_length=2.0)], 2.0)
    results = {"poisson": {"no-spec": {"16.0": dict(row), "2.0": dict(row)}, "faser": {"2.0": dict(row)}}}
    metrics.add_ratios(results["poisson"])
    text = report.markdown(results, {"synthetic_acceptance": {"low": 0.2, "high": 0.9}})
    assert "SYNTHETIC ACCEPTANCE" in text.splitlines()[0]
    assert text.index("rate 2.0 req/s") < text.index("rate 16.0 req/s")
    assert sorted(["trace", "16.0", "2.0"], key=metrics.rate_order) == ["2.0", "16.0", "trace"]
    report.plot(results, tmp_path / "p.png")
    assert (tmp_path / "p.png").stat().st_size > 10_000


def test_serving_time_compiles_and_a_step_trace_are_reported(tmp_path):
    from types import SimpleNamespace

    from benchmarks import serve_bench
    from benchmarks.serve import report

    args = SimpleNamespace(out_dir=tmp_path, tag="t")
    (tmp_path / "logs").mkdir()
    warn = "[2026-11-26 13:04:10] Triton kernel '{}' took {} s to compile after serving started. Serving-time ..."
    lines = [warn.format("_small_copy_kernel", "0.30"), "FASER warm-up: depths 0..7 at batches [2] in 3.1 s",
             "[2026-11-26 13:04:09] The server is fired up and ready to roll!",  # the warm-up's compile: not counted
             warn.format("_fwd_kernel", "1.20"), "Decode batch ...", warn.format("assign_draft_cache_locs", "0.07")]
    serve_bench.log_path(args, "faser").write_text("\n".join(lines))
    serve_bench.log_path(args, "no-spec").write_text("Decode batch ...\n")
    compiles = serve_bench.serving_compiles(args, ["faser", "no-spec", "fixed-3"])  # fixed-3: no log
    assert compiles == {"faser": {"count": 2, "seconds": 1.27}, "no-spec": {"count": 0, "seconds": 0.0}}
    row = metrics.summarise([Result("chat", True, ttft=0.1, e2e=1.0, output_tokens=4, accept_length=2.0)], 2.0)
    text = report.markdown({"poisson": {"faser": {"2.0": row}}}, {"serving_time_compiles": compiles})
    assert "Triton compiles after the server was up (each configuration's last server" in text
    assert "faser 2 (1.27 s)" in text and "no-spec 0" not in text
    assert "step trace" not in text
    traced = report.markdown({"poisson": {"faser": {"2.0": row}}}, {"step_trace": "/tmp/steps.jsonl"})
    assert "**FASER's servers wrote a step trace**" in traced


def test_each_configuration_writes_its_own_step_trace_and_phase_times(monkeypatch):
    from benchmarks import serve_bench

    monkeypatch.delenv("SGLANG_FASER_STEP_TRACE", raising=False)
    monkeypatch.delenv("SGLANG_FASER_PHASE_TIMES", raising=False)
    assert serve_bench.per_config_env("faser") == {}
    monkeypatch.setenv("SGLANG_FASER_STEP_TRACE", "/tmp/r/steps.jsonl")
    assert serve_bench.per_config_env("faser-k0") == {"SGLANG_FASER_STEP_TRACE": "/tmp/r/steps_faser-k0.jsonl"}
    monkeypatch.setenv("SGLANG_FASER_PHASE_TIMES", "/tmp/r/phases")
    assert serve_bench.per_config_env("no-spec") == {"SGLANG_FASER_STEP_TRACE": "/tmp/r/steps_no-spec.jsonl",
                                                "SGLANG_FASER_PHASE_TIMES": "/tmp/r/phases_no-spec"}


def test_lossless_check_counts_outputs_equal_to_no_spec_and_drops_the_texts():
    def row(*texts):
        return metrics.summarise([Result("chat", True, output_tokens=2, text=t) for t in texts], 1.0)

    table = {"no-spec": {"4.0": row("a", "b", "c")}, "faser": {"4.0": row("a", "x", "c")}}
    metrics.check_lossless(table)
    assert table["faser"]["4.0"]["same_output_as_no_spec"] == "2/3"
    assert table["no-spec"]["4.0"]["same_output_as_no_spec"] == "3/3"
    assert all("outputs" not in r for runs in table.values() for r in runs.values())


def test_max_concurrency_bounds_the_requests_in_flight_and_custom_params_reach_the_server():
    """A stand-in /generate that streams one chunk after a short wait, counts how many requests it holds and keeps
    what each asked for (the per-kind oracle's caps travel as SGLang's ``sampling_params.custom_params``)."""
    import asyncio
    import json
    import threading

    from aiohttp import web

    from benchmarks.serve.driver import drive

    state = {"now": 0, "most": 0, "asked": []}

    async def generate(request):
        body = await request.json()
        state["asked"].append((body["text"], body["sampling_params"].get("custom_params")))
        state["now"] += 1
        state["most"] = max(state["most"], state["now"])
        response = web.StreamResponse()
        await response.prepare(request)
        await asyncio.sleep(0.05)
        chunk = {"text": "x", "meta_info": {"completion_tokens": 1}}
        await response.write(b"data: " + json.dumps(chunk).encode() + b"\n\ndata: [DONE]\n\n")
        state["now"] -= 1
        return response

    loop, ready = asyncio.new_event_loop(), threading.Event()
    app = web.Application()
    app.router.add_post("/generate", generate)
    runner = web.AppRunner(app)

    def serve():
        asyncio.set_event_loop(loop)
        loop.run_until_complete(runner.setup())
        site = web.TCPSite(runner, "127.0.0.1", 0)
        loop.run_until_complete(site.start())
        state["port"] = runner.addresses[0][1]
        ready.set()
        loop.run_forever()

    threading.Thread(target=serve, daemon=True).start()
    assert ready.wait(10)
    url = f"http://127.0.0.1:{state['port']}"
    requests = workload.build(10, float("inf"), "poisson", 1)
    try:
        results, _ = drive(url, requests, max_concurrency=3)
        assert all(r.ok for r in results) and state["most"] == 3
        state["most"] = 0
        drive(url, requests)
        assert state["most"] == 10
        assert {params for _, params in state["asked"]} == {None}
        state["asked"].clear()
        mixed = workload.build(6, float("inf"), "poisson", 1, prompt_set="mixed")
        drive(url, oracle_lengths.plan_requests(mixed, (3, 0)))
        caps = {text: params["faser"]["max_len"] for text, params in state["asked"]}
        assert [caps[r.prompt] for r in mixed] == [3 if r.kind == "repeat" else 0 for r in mixed]
        assert {r.kind for r in mixed} == {"repeat", "noise"}
    finally:
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)


def test_step_phases_per_decode_step_and_the_oracle_table():
    """Two reads of the counters and phase seconds give one decode step's rows and milliseconds by phase; the
    oracle reports their medians over repeats."""
    from benchmarks.oracle_lengths import step_table
    from benchmarks.serve.telemetry import step_phases_delta

    def read(steps, requests, verified, busy):
        return {"counters": {"steps": steps, "requests": requests, "verified": verified, "committed": verified // 2},
                "busy_s": dict(zip(("draft", "verify", "draft_extend", "schedule", "prefill", "idle"), busy))}

    delta = step_phases_delta(read(10, 100, 200, (1.0, 2.0, 0.5, 0.1, 0.0, 0.2)),
                              read(20, 260, 520, (1.1, 2.3, 0.6, 0.12, 0.05, 0.2)))
    assert delta["steps"] == 10 and delta["requests"] == 16 and delta["verified"] == 32 and delta["committed"] == 16
    assert delta["verify_ms"] == pytest.approx(30.0) and delta["schedule_ms"] == pytest.approx(2.0)
    assert delta["prefill_ms"] == pytest.approx(5.0) and delta["idle_ms"] == pytest.approx(0.0)
    assert step_phases_delta(read(10, 0, 0, (0,) * 6), read(10, 0, 0, (0,) * 6)) is None  # no decode step ran
    assert step_phases_delta(None, read(1, 1, 1, (0,) * 6)) is None
    lines = step_table({"2/1": [delta, {**delta, "verify_ms": 50.0}, {**delta, "verify_ms": 10.0}]})
    # the step's own phases sum to its time; prefill and idle are shown beside it
    assert lines[-1] == "| 2/1 | 16.0 | 32.0 | 16.0 | 10.00 | 30.00 | 10.00 | 2.00 | 5.00 | 0.00 | 52.00 |"
    assert step_table({}) == []


def test_output_spread_gives_every_configuration_the_same_varied_lengths():
    from benchmarks.serve import workload

    assert workload.output_lengths(5, 64, 0.0) == [64] * 5
    lengths = workload.output_lengths(200, 64, 0.5, seed=3)
    assert lengths == workload.output_lengths(200, 64, 0.5, seed=3)  # seeded: the same for every server
    assert min(lengths) >= 32 and max(lengths) <= 96 and len(set(lengths)) > 20
    with pytest.raises(ValueError, match="output spread"):
        workload.output_lengths(3, 64, 1.0)
    parser = argparse.ArgumentParser()
    workload.add_output_spread_flag(parser)
    assert parser.parse_args(["--output-spread", "0.5"]).output_spread == 0.5
    with pytest.raises(SystemExit):
        parser.parse_args(["--output-spread", "1.5"])
    requests = workload.build(40, 16.0, "gamma", 64, prompt_set="mixed", output_spread=0.5)
    assert [r.max_new_tokens for r in requests] == workload.output_lengths(40, 64, 0.5)
    assert {r.max_new_tokens for r in workload.build(8, 16.0, "poisson", 64, prompt_set="mixed")} == {64}


def test_a_cell_holds_the_requests_of_eight_seconds_unless_told():
    from benchmarks import serve_bench

    _, args = serve_bench.parse_args(["--prompts", "mixed"])
    assert [serve_bench.requests_at(args, r) for r in (1.0, 4.0, 10.0, 16.0, 64.0, float("inf"))] == \
        [32, 32, 80, 128, 128, 32]
    _, told = serve_bench.parse_args(["--requests", "20"])
    assert serve_bench.requests_at(told, 64.0) == 20
    _, quick = serve_bench.parse_args(["--quick"])
    assert serve_bench.requests_at(quick, 16.0) == 12
    cells = serve_bench.build_workloads(args, 64, [1.0, 16.0])
    assert {process: [len(c) for c in by_rate.values()] for process, by_rate in cells.items()} == \
        {"poisson": [32, 128], "gamma": [32, 128]}
