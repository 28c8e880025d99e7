"""The engines one control service manages: servers named with ``--engine-url``, or the workers of an SGLang router.

SGLang's router (``sglang-router``) is the fleet's registry: with ``--router-url`` the fleet follows its worker list
(``GET /workers``), so replicas that join or leave behind the router join or leave here. Each replica is reached
through its own :class:`~control.engine_client.EngineClient` (SGLang's ``/set_internal_state`` and
``/server_info``).

A policy change goes to every replica (:meth:`Fleet.push`). It counts as made once at least one replica took it;
replicas that could not be reached are reported, not skipped silently, and :meth:`Fleet.reconcile` (run every
second by the control server) brings every reachable replica that is behind (it was down, or joined later) to the
current version. Telemetry sums the fleet like the ranks of one engine (``engine_client.aggregate``).
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field

import requests

from control.engine_client import EngineClient, EngineUnavailable, NoFaserWorker, aggregate
from sglang_faser.spec.config import FaserConfig

logger = logging.getLogger("faser.control.fleet")


class FleetError(ValueError):
    """Bad fleet settings (duplicate or malformed URLs, no engine and no router)."""


@dataclass
class Replica:
    url: str
    client: EngineClient
    reachable: bool = False
    version: int | None = None
    rank_versions: list[int] = field(default_factory=list)
    error: str = "not probed yet"
    no_faser: bool = False  # it answers, but runs no FASER worker
    report: dict | None = None

    def probe(self) -> None:
        try:
            reports = self.client.reports()
        except (EngineUnavailable, NoFaserWorker) as exc:
            self.fail(exc)
            return
        self.reachable, self.error, self.no_faser = True, "", False
        self.rank_versions = [int(r["version"]) for r in reports]
        self.version = min(self.rank_versions)
        self.report = aggregate(reports)

    def fail(self, exc: Exception, doing: str = "") -> None:
        self.reachable, self.report = False, None
        self.error, self.no_faser = f"{doing}{exc}", isinstance(exc, NoFaserWorker)


def normalise(url: str) -> str:
    url = url.strip().rstrip("/")
    if not url.startswith(("http://", "https://")) or len(url.split("://", 1)[1]) == 0:
        raise FleetError(f"engine URL must be http(s)://host:port, got {url!r}")
    return url


class Fleet:
    def __init__(self, engine_urls: list[str] = (), router_url: str | None = None, api_key: str | None = None,
                 timeout_s: float = 10.0):
        urls = [normalise(u) for u in engine_urls]
        duplicates = sorted({u for u in urls if urls.count(u) > 1})
        if duplicates:
            raise FleetError(f"--engine-url given twice: {duplicates[0]}")
        if not urls and not router_url:
            raise FleetError("give at least one --engine-url or a --router-url")
        self.router_url = normalise(router_url) if router_url else None
        self.api_key, self.timeout_s = api_key, timeout_s
        self._static = urls
        self._lock = threading.RLock()
        self._replicas: dict[str, Replica] = {u: self._replica(u) for u in urls}
        self.router_error = ""

    def _replica(self, url: str) -> Replica:
        return Replica(url, EngineClient(url, timeout_s=self.timeout_s, api_key=self.api_key))

    # -- membership ------------------------------------------------------------------------------------------
    def router_workers(self) -> list[str]:
        """The router's workers (``GET /workers``); raises EngineUnavailable if it does not answer like one."""
        try:
            response = requests.get(self.router_url + "/workers", timeout=self.timeout_s)
            response.raise_for_status()
            workers = response.json()["workers"]
            return [normalise(w["url"]) for w in workers]
        except (requests.RequestException, ValueError, KeyError, TypeError) as exc:
            raise EngineUnavailable(f"router at {self.router_url} did not list its workers: "
                                    f"{type(exc).__name__}: {str(exc)[:200]}") from None

    def refresh(self) -> None:
        """Follow the router's worker list (if any), then probe every replica."""
        if self.router_url:
            try:
                listed = self.router_workers()
                self.router_error = "" if listed else f"router at {self.router_url} has no workers"
            except EngineUnavailable as exc:
                listed, self.router_error = None, str(exc)
            if listed is not None:
                with self._lock:
                    wanted = list(dict.fromkeys(self._static + listed))
                    for url in wanted:
                        self._replicas.setdefault(url, self._replica(url))
                    for url in [u for u in self._replicas if u not in wanted]:
                        logger.info("replica %s left the router's worker list", url)
                        del self._replicas[url]
        for replica in self.replicas():
            replica.probe()

    def replicas(self) -> list[Replica]:
        with self._lock:
            return list(self._replicas.values())

    # -- the PolicyStore's engine interface ------------------------------------------------------------------
    def ready(self) -> bool:
        self.refresh()
        return any(r.reachable for r in self.replicas())

    def report(self) -> dict:
        """One report for the fleet (see :func:`merge`); raises if no replica answers."""
        self.refresh()
        live = [r for r in self.replicas() if r.reachable]
        if not live:
            raise self._nobody()
        merged = aggregate([r.report for r in live])
        merged["replicas"] = self.rows()
        return merged

    def push(self, config: FaserConfig, version: int) -> None:
        """Send a policy to every replica; raises only if none took it (then nothing changed anywhere)."""
        self.refresh()
        took = 0
        for replica in self.replicas():
            try:
                replica.client.push(config, version)
                took += 1
                replica.probe()
            except (EngineUnavailable, NoFaserWorker) as exc:
                replica.fail(exc, f"policy v{version} not delivered: ")
                logger.warning("replica %s: policy v%d not delivered (will retry): %s", replica.url, version, exc)
        if not took:
            raise self._nobody()

    def reconcile(self, config: FaserConfig, version: int) -> None:
        """Bring every reachable replica that is behind ``version`` (it was down, or joined) up to it."""
        for replica in self.replicas():
            if replica.reachable and replica.version < version:
                logger.info("replica %s runs v%s; pushing v%d", replica.url, replica.version, version)
                try:
                    replica.client.push(config, version)
                    replica.probe()
                except (EngineUnavailable, NoFaserWorker) as exc:
                    replica.fail(exc, f"policy v{version} not delivered: ")

    def applied(self, version: int) -> bool:
        live = [r for r in self.replicas() if r.reachable]
        return bool(live) and all(r.version == version and set(r.rank_versions) == {version} for r in live)

    def rows(self) -> list[dict]:
        return [{"url": r.url, "reachable": r.reachable, "version": r.version, "rank_versions": r.rank_versions,
                 "error": r.error, "window": r.report["telemetry"]["window"] if r.report else None}
                for r in self.replicas()]

    def newest(self) -> Replica:
        """The reachable replica with the highest version (whose policy a fresh control service adopts)."""
        live = [r for r in self.replicas() if r.reachable]
        if not live:
            raise self._nobody()
        return max(live, key=lambda r: r.version)

    def _nobody(self) -> Exception:
        """No replica answers with a FASER report: NoFaserWorker if every one answers without one."""
        replicas = self.replicas()
        text = "; ".join([f"{r.url}: {r.error}" for r in replicas] + [self.router_error] * bool(self.router_error))
        if replicas and all(r.no_faser for r in replicas):
            return NoFaserWorker(text)
        return EngineUnavailable(text or "no replica")
