"""Fleet control: one control service, several replicas behind SGLang's real router (``sglang-router``).

Two ``sglang_faser.launch_server`` replicas of the embedded pair start behind ``python -m
sglang_router.launch_router``; a control service follows the router (``--router-url``). A policy change reaches
both; a third replica registered with the router later is brought to the current version; a killed replica is
reported unreachable while the others keep the version; requests through the router do not fail while
policies flip; greedy outputs through the router equal a single server's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time

import pytest
import requests
from conftest import faserctl, wait_for_sync

from control.engine_client import EngineUnavailable, aggregate
from control.fleet import Fleet, FleetError
from sglang_faser.server_process import ServerProcess, free_port

REPLICA_ARGS = ["--speculative-algorithm", "EAGLE", "--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
                "--speculative-num-draft-tokens", "4", "--max-total-tokens", "4096", "--faser-control", "off",
                "--sleep-on-idle"]
GREEDY = {"temperature": 0, "max_new_tokens": 12, "ignore_eos": True}


# -- the fleet's pure parts ------------------------------------------------------------------------------------
def test_bad_fleets_are_refused_with_a_clear_message():
    with pytest.raises(FleetError, match="twice"):
        Fleet(["http://127.0.0.1:1", "http://127.0.0.1:1/"])
    with pytest.raises(FleetError, match="http"):
        Fleet(["127.0.0.1:1"])
    with pytest.raises(FleetError, match="at least one"):
        Fleet([])


@pytest.mark.parametrize("args, message", [
    (["--engine-url", "http://127.0.0.1:1", "--engine-url", "http://127.0.0.1:1"], "given twice"),
    (["--engine-url", "localhost:1"], "http(s)://host:port"),
    ([], "at least one --engine-url or a --router-url"),
])
def test_the_control_service_refuses_a_bad_fleet_at_start(args, message):
    proc = subprocess.run([sys.executable, "-m", "control", *args, "--port", str(free_port())], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 2 and message in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_unreachable_replicas_and_routers_are_reported_not_skipped():
    fleet = Fleet(["http://127.0.0.1:1"], router_url="http://127.0.0.1:2", timeout_s=1.0)
    assert not fleet.ready()
    with pytest.raises(EngineUnavailable, match="127.0.0.1:1.*router at http://127.0.0.1:2"):
        fleet.report()
    (row,) = fleet.rows()
    assert row["url"] == "http://127.0.0.1:1" and row["reachable"] is False and "unreachable" in row["error"]


def _span(seconds, steps, verify, tokens, batch):
    return {"seconds": seconds, "steps": steps, "mean_batch_size": batch, "committed_tokens_per_s": tokens / seconds,
            "shares": {"verify": verify, "idle": 1 - verify}, "tokens": {"committed": tokens},
            "length_histogram": [steps], "acceptance_by_position": []}


def test_fleet_telemetry_sums_counters_and_weights_shares_by_time():
    def report(version, seconds, steps, verify, tokens, batch):
        span = _span(seconds, steps, verify, tokens, batch)
        return {"version": version, "ranks": 1, "telemetry": {"window_s": 10, "window": span, "total": span}}

    merged = aggregate([report(3, 10.0, 100, 0.5, 1000, 2.0), report(2, 5.0, 300, 0.2, 500, 4.0)])
    window = merged["telemetry"]["window"]
    assert window["tokens"]["committed"] == 1500 and window["steps"] == 400 and window["length_histogram"] == [400]
    assert window["shares"]["verify"] == pytest.approx((0.5 * 10 + 0.2 * 5) / 15)
    assert window["mean_batch_size"] == pytest.approx((2 * 100 + 4 * 300) / 400)
    assert window["committed_tokens_per_s"] == pytest.approx(100 + 100)
    assert merged["version"] == 2 and merged["ranks"] == 2


# -- two replicas behind the real router -----------------------------------------------------------------------
class Router:
    def __init__(self, workers: list[str], log_path):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = open(log_path, "w")
        self.proc = subprocess.Popen([sys.executable, "-m", "sglang_router.launch_router", "--host", "127.0.0.1",
                                      "--port", str(self.port), "--worker-urls", *workers, "--policy", "round_robin",
                                      "--prometheus-port", str(free_port()), "--log-level", "warn"],
                                     stdout=self.log, stderr=subprocess.STDOUT,
                                     env=os.environ.copy())
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                if len(requests.get(self.url + "/workers", timeout=2).json().get("workers", [])) == len(workers):
                    return
            except (requests.RequestException, ValueError):
                pass
            assert self.proc.poll() is None, "the router exited"
            time.sleep(0.5)
        raise TimeoutError("router did not list its workers")

    def add(self, url: str) -> None:
        response = requests.post(self.url + "/workers", json={"url": url}, timeout=30)
        assert response.status_code < 300, response.text

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=30)
        self.log.close()


class Control:
    def __init__(self, router_url: str):
        self.port = free_port()
        self.target = f"127.0.0.1:{self.port}"
        self.proc = subprocess.Popen([sys.executable, "-m", "control.server", "--router-url", router_url, "--port",
                                      str(self.port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                     env=os.environ.copy())

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=30)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    root = tmp_path_factory.mktemp("fleet")
    replicas = [ServerProcess(REPLICA_ARGS, log_path=root / f"replica{i}.log") for i in range(2)]
    router = control = None
    try:
        for replica in replicas:
            replica.start()
        router = Router([r.url for r in replicas], root / "router.log")
        control = Control(router.url)
        wait_for_sync(control.target, timeout=120)
        yield {"replicas": replicas, "router": router, "control": control, "root": root}
    finally:
        for part in (control, router, *replicas):
            if part is not None:
                part.stop()


def _status(target: str) -> dict:
    return json.loads(faserctl(target, "status", "--output", "json").stdout)


def _until(predicate, timeout: float = 60.0):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(0.5)


def test_a_policy_change_reaches_every_replica_and_requests_keep_flowing(fleet):
    control, router = fleet["control"], fleet["router"]
    failures, stop = [], threading.Event()

    def load():
        while not stop.is_set():
            body = {"text": "the lazy dog", "sampling_params": {**GREEDY, "max_new_tokens": 8}}
            try:
                if requests.post(router.url + "/generate", json=body, timeout=120).status_code != 200:
                    failures.append("HTTP error")
            except requests.RequestException as exc:
                failures.append(str(exc))

    threads = [threading.Thread(target=load) for _ in range(2)]
    for t in threads:
        t.start()
    try:
        for max_len in (1, 3, 0, 2):  # policies flip under load
            reply = json.loads(faserctl(control.target, "set-policy", "--max-len", str(max_len)).stdout)
            assert {r["version"] for r in reply["replicas"]} == {reply["version"]}, reply
            assert reply["applied"] is True and len(reply["replicas"]) == 2
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=180)
    assert failures == []
    telemetry = json.loads(faserctl(control.target, "telemetry", "--json").stdout)
    assert len(telemetry["replicas"]) == 2 and telemetry["ranks"] == 2
    committed = [r["window"]["tokens"]["committed"] for r in telemetry["replicas"]]
    assert telemetry["window"]["tokens"]["committed"] == sum(committed) and min(committed) > 0  # both served
    table = faserctl(control.target, "status").stdout
    assert all(r.url in table for r in fleet["replicas"])


def test_greedy_output_through_the_router_equals_a_single_server(fleet, embedded_tokenizer):
    router, single = fleet["router"], fleet["replicas"][0]
    for text in ("def fib(n):", "Once upon a time", "the lazy dog"):
        body = {"text": text, "sampling_params": GREEDY}
        through = requests.post(router.url + "/generate", json=body, timeout=120).json()
        direct = requests.post(single.url + "/generate", json=body, timeout=120).json()
        assert through["output_ids"] == direct["output_ids"]


def test_a_replica_that_joins_later_gets_the_current_policy(fleet):
    control, router = fleet["control"], fleet["router"]
    version = json.loads(faserctl(control.target, "set-policy", "--max-len", "2").stdout)["version"]
    late = ServerProcess(REPLICA_ARGS, log_path=fleet["root"] / "late.log")
    late.start()
    fleet["replicas"].append(late)
    router.add(late.url)

    def caught_up():
        rows = {r["url"]: r for r in _status(control.target)["replicas"]}
        row = rows.get(late.url)
        return row is not None and row["reachable"] and row["version"] == version

    assert _until(caught_up, timeout=90), _status(control.target)
    assert requests.get(late.url + "/server_info", timeout=30).json()["internal_states"][0]["faser"]["policy"][
        "max_len"] == 2


def test_a_killed_replica_shows_as_unreachable_while_the_others_keep_the_version(fleet):
    control = fleet["control"]
    victim = fleet["replicas"][-1]
    victim.stop()
    version = json.loads(faserctl(control.target, "set-policy", "--max-len", "1").stdout)["version"]

    def reported():
        rows = {r["url"]: r for r in _status(control.target)["replicas"]}
        row = rows.get(victim.url)
        return row is None or not row["reachable"]

    assert _until(reported, timeout=60)
    status = _status(control.target)
    live = [r for r in status["replicas"] if r["reachable"]]
    assert len(live) == len(fleet["replicas"]) - 1 and all(r["version"] == version for r in live)
    assert status["in_sync_with_engine"] is True  # every reachable replica runs it


def test_a_router_without_workers_and_a_url_that_is_not_sglang_are_refused_clearly(tmp_path):
    import http.server

    class NotSGLang(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(404)
            self.end_headers()

        def log_message(self, *args):
            pass

    web = http.server.ThreadingHTTPServer(("127.0.0.1", 0), NotSGLang)
    threading.Thread(target=web.serve_forever, daemon=True).start()
    router = Router([], tmp_path / "router.log")
    try:
        with pytest.raises(EngineUnavailable, match="has no workers"):
            Fleet(router_url=router.url).report()
        with pytest.raises(EngineUnavailable, match="HTTP 404"):
            Fleet([f"http://127.0.0.1:{web.server_address[1]}"]).report()
    finally:
        router.stop()
        web.shutdown()


def test_every_data_parallel_rank_reports_the_policy_version(tmp_path, monkeypatch):
    """``--dp-size 2`` on CPU (one core per rank, as SGLang asks): both scheduler ranks run and report the version."""
    monkeypatch.setenv("SGLANG_CPU_OMP_THREADS_BIND", "0|1")
    with ServerProcess(REPLICA_ARGS[:-3] + ["--dp-size", "2", "--sleep-on-idle"], log_path=tmp_path / "dp.log") as dp:
        wait_for_sync(dp.control_target, timeout=120)
        body = {"text": "the lazy dog", "sampling_params": GREEDY}
        assert requests.post(dp.url + "/generate", json=body, timeout=120).status_code == 200
        version = json.loads(faserctl(dp.control_target, "set-policy", "--max-len", "2").stdout)["version"]
        (row,) = _status(dp.control_target)["replicas"]
        assert row["rank_versions"] == [version, version]
