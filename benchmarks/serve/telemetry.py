"""FASER's server-side counters (``/server_info`` → ``internal_states[i]["faser"]``), read before and after a run.

The counters are running totals, so one run's share is the difference of two reads. Servers without the FASER
worker (no speculation, or ``--faser-mode stock``) give ``None``, and the harness reports null; ``--faser-mode off``
runs the worker and reports.
"""

from __future__ import annotations

SCALARS = ("steps", "requests", "proposed", "verified", "pruned", "accepted", "committed")


def read_counters(url: str) -> dict | None:
    import requests

    try:
        states = requests.get(url + "/server_info", timeout=30).json().get("internal_states", [])
    except (requests.RequestException, ValueError):
        return None
    reports = [s["faser"].get("counters") for s in states if isinstance(s, dict) and "faser" in s]
    return reports[0] if reports and reports[0] else None


def counters_delta(before: dict | None, after: dict | None) -> dict | None:
    """What happened between two reads: scalar differences and the length histogram's difference."""
    if not before or not after:
        return None
    delta = {k: after[k] - before.get(k, 0) for k in SCALARS if k in after}
    old, new = before.get("length_histogram") or [], after.get("length_histogram") or []
    delta["length_histogram"] = [n - (old[i] if i < len(old) else 0) for i, n in enumerate(new)]
    return delta
