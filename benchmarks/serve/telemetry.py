"""FASER's server-side counters and step phases (``/server_info`` → ``internal_states[i]["faser"]``), read
before and after a run.

The counters and the phases' busy seconds are running totals, so one run's share is the difference of two reads.
Servers without the FASER worker (no speculation, or ``--faser-mode stock``) give ``None``, and the harness reports
null; ``--faser-mode off`` runs the worker and reports.
"""

from __future__ import annotations

SCALARS = ("steps", "requests", "proposed", "verified", "pruned", "accepted", "committed")


PHASES = ("draft", "verify", "draft_extend", "schedule")  # a decode step's phases (spec/telemetry.py)
BETWEEN = ("prefill", "idle")  # the server's time outside decode steps


def _report(url: str) -> dict | None:
    """Rank 0's FASER report (``FaserEngine.report``), or None (no FASER worker, or no answer)."""
    import requests

    try:
        states = requests.get(url + "/server_info", timeout=30).json().get("internal_states", [])
    except (requests.RequestException, ValueError):
        return None
    reports = [s["faser"] for s in states if isinstance(s, dict) and "faser" in s]
    return reports[0] if reports else None


def read_step_phases(url: str) -> dict | None:
    """The counters and, since start, the seconds each decode-step phase was busy (telemetry's ``total``)."""
    report = _report(url)
    if not report or not report.get("counters"):
        return None
    total = report["telemetry"]["total"]
    return {"counters": report["counters"],
            "busy_s": {p: total["shares"][p] * total["seconds"] for p in (*PHASES, *BETWEEN)}}


def step_phases_delta(before: dict | None, after: dict | None) -> dict | None:
    """Per decode step between two ``read_step_phases``: requests, verified rows, committed tokens and milliseconds
    per phase, and the prefill and idle milliseconds around them (a run's whole time, spread over its decode
    steps)."""
    if not before or not after:
        return None
    steps = after["counters"]["steps"] - before["counters"]["steps"]
    if steps <= 0:
        return None
    per_step = {k: (after["counters"][k] - before["counters"][k]) / steps
                for k in ("requests", "verified", "committed")}
    per_step.update({f"{p}_ms": (after["busy_s"][p] - before["busy_s"][p]) * 1000.0 / steps
                     for p in (*PHASES, *BETWEEN)})
    return {"steps": steps, **per_step}


def counters_delta(before: dict | None, after: dict | None) -> dict | None:
    """What happened between two reads: scalar differences and the length histogram's difference."""
    if not before or not after:
        return None
    delta = {k: after[k] - before.get(k, 0) for k in SCALARS if k in after}
    old, new = before.get("length_histogram") or [], after.get("length_histogram") or []
    delta["length_histogram"] = [n - (old[i] if i < len(old) else 0) for i, n in enumerate(new)]
    return delta
