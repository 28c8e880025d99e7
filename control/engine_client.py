"""The control service's only link to the engine: SGLang's own HTTP endpoints on the engine's port.

``POST /set_internal_state`` carries a policy to every scheduler rank (applied at a step boundary, see
sglang_faser/engine/control_bridge.py); ``GET /server_info`` returns each rank's ``faser`` report. Speaking HTTP
keeps the service a separate concern: it runs beside the engine in the launcher process or as its own process,
and a crash on either side leaves the other running.
"""

from __future__ import annotations

import requests

from sglang_faser.engine.control_bridge import encode_policy
from sglang_faser.spec.config import FaserConfig


class EngineUnavailable(RuntimeError):
    """The engine did not answer (starting, stopped, or unreachable)."""


class NoFaserWorker(RuntimeError):
    """The engine answers but runs no FASER worker (no speculation, or --faser-mode stock at launch)."""


class EngineClient:
    def __init__(self, url: str, timeout_s: float = 10.0, api_key: str | None = None):
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}

    def _call(self, method: str, path: str, **kwargs):
        try:
            response = requests.request(method, self.url + path, timeout=self.timeout_s, headers=self._headers,
                                        **kwargs)
        except requests.RequestException as exc:
            raise EngineUnavailable(f"engine at {self.url} unreachable: {type(exc).__name__}") from None
        if response.status_code >= 500 or response.status_code in (404, 503):
            raise EngineUnavailable(f"engine at {self.url} answered {path} with HTTP {response.status_code}")
        if response.status_code >= 400:  # e.g. 401: the engine has an --api-key this service was not given
            raise EngineUnavailable(f"engine at {self.url} refused {path} with HTTP {response.status_code}: "
                                    f"{response.text.strip()[:200]}")
        return response

    def ready(self) -> bool:
        try:
            self._call("GET", "/health")
        except EngineUnavailable:
            return False
        return True

    def _json(self, method: str, path: str, **kwargs):
        response = self._call(method, path, **kwargs)
        try:
            return response.json()
        except ValueError:
            raise EngineUnavailable(f"engine at {self.url} answered {path} with no JSON") from None

    def reports(self) -> list[dict]:
        """Each scheduler rank's ``faser`` report (NoFaserWorker if none has one)."""
        info = self._json("GET", "/server_info")
        reports = [state["faser"] for state in info.get("internal_states", []) if "faser" in state]
        if not reports:
            raise NoFaserWorker("the engine runs no FASER worker (start it with speculative decoding and FASER on)")
        return reports

    def report(self) -> dict:
        """One report for the whole engine: counters summed over ranks, shares and rates averaged."""
        return aggregate(self.reports())

    def push(self, config: FaserConfig, version: int) -> None:
        updated = self._json("POST", "/set_internal_state", json={"server_args": encode_policy(config, version)})
        if not isinstance(updated, list) or not updated or not all(updated):
            raise NoFaserWorker(f"the engine refused the policy (per-rank answers: {updated})")


def aggregate(reports: list[dict]) -> dict:
    """Several reports as one: the ranks of one engine (each DP rank steps on its own batch), or the replicas of a
    fleet. Tokens, steps, throughput and lengths add up; phase shares and the mean batch size are weighted by each
    report's seconds and steps; ``ranks`` counts scheduler ranks; the version is the lowest in force."""
    first = dict(reports[0])
    first["ranks"] = sum(r.get("ranks", 1) for r in reports)
    if len(reports) == 1:
        return first
    telemetry = {"window_s": reports[0]["telemetry"]["window_s"]}
    for span in ("window", "total"):
        spans = [r["telemetry"][span] for r in reports]
        seconds = sum(s["seconds"] for s in spans) or 1.0
        steps = sum(s["steps"] for s in spans)
        merged = dict(spans[0])
        merged["seconds"] = max(s["seconds"] for s in spans)
        merged["tokens"] = {k: sum(s["tokens"][k] for s in spans) for k in spans[0]["tokens"]}
        merged["shares"] = {k: sum(s["shares"][k] * s["seconds"] for s in spans) / seconds for k in spans[0]["shares"]}
        merged["steps"] = steps
        merged["mean_batch_size"] = sum(s["mean_batch_size"] * s["steps"] for s in spans) / steps if steps else 0.0
        merged["committed_tokens_per_s"] = sum(s["committed_tokens_per_s"] for s in spans)
        width = max(len(s["length_histogram"]) for s in spans)
        merged["length_histogram"] = [sum(s["length_histogram"][k] for s in spans if k < len(s["length_histogram"]))
                                      for k in range(width)]
        telemetry[span] = merged
    first["telemetry"] = telemetry
    first["version"] = min(r["version"] for r in reports)
    return first
