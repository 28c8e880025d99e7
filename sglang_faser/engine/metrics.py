"""FASER's counters on SGLang's Prometheus ``/metrics`` page, under a ``faser_`` prefix.

SGLang (``--enable-metrics``) runs prometheus_client in multiprocess mode: every process writes its samples under
``PROMETHEUS_MULTIPROC_DIR`` and the HTTP server's ``/metrics`` merges them (utils/common.py:2843). Metrics made
here, in the scheduler process, therefore appear on that page with no extra endpoint. Without
``--enable-metrics`` the directory is unset and nothing is created.
"""

from __future__ import annotations

import os

TOKEN_COUNTERS = ("proposed", "verified", "accepted", "pruned", "committed", "drafted", "draft_skipped")


class FaserMetrics:
    def __init__(self, labels: dict[str, str]):
        from prometheus_client import Counter, Gauge

        names = sorted(labels)
        self._labels = labels
        self.tokens = Counter("faser_tokens", "FASER token counters by kind (proposed, verified, accepted, "
                              "pruned, committed, drafted, draft_skipped)", names + ["kind"])
        self.steps = Counter("faser_steps", "FASER decode steps", names)
        self.share = Gauge("faser_phase_share", "Share of wall time per phase over the telemetry window",
                           names + ["phase"], multiprocess_mode="mostrecent")
        self.length = Gauge("faser_mean_length", "Mean per-request speculative length over the window", names,
                            multiprocess_mode="mostrecent")
        self.batch = Gauge("faser_mean_batch_size", "Mean decode batch size over the window", names,
                           multiprocess_mode="mostrecent")
        self.goodput = Gauge("faser_committed_tokens_per_second", "Committed tokens per second over the window",
                             names, multiprocess_mode="mostrecent")
        self.version = Gauge("faser_policy_version", "Version of the FASER policy in force", names,
                             multiprocess_mode="mostrecent")
        self._last = dict.fromkeys(TOKEN_COUNTERS, 0)
        self._last_steps = 0

    @classmethod
    def create(cls, labels: dict[str, str]) -> FaserMetrics | None:
        return cls(labels) if os.environ.get("PROMETHEUS_MULTIPROC_DIR") else None

    def update(self, counters, window: dict, version: int) -> None:
        for kind in TOKEN_COUNTERS:
            value = int(getattr(counters, kind))
            if value > self._last[kind]:
                self.tokens.labels(**self._labels, kind=kind).inc(value - self._last[kind])
            self._last[kind] = value
        if counters.steps > self._last_steps:
            self.steps.labels(**self._labels).inc(counters.steps - self._last_steps)
            self._last_steps = counters.steps
        for phase, share in window["shares"].items():
            self.share.labels(**self._labels, phase=phase).set(share)
        histogram = window["length_histogram"]
        total = sum(histogram)
        self.length.labels(**self._labels).set(sum(k * n for k, n in enumerate(histogram)) / total if total else 0)
        self.batch.labels(**self._labels).set(window["mean_batch_size"])
        self.goodput.labels(**self._labels).set(window["committed_tokens_per_s"])
        self.version.labels(**self._labels).set(version)
