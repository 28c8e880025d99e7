"""The serving benchmark's parts: workloads and arrivals, the load driver, metrics (used by serve_bench.py)."""
