"""FASER's pure core: policy, cost model, acceptance statistics, frontier planning, telemetry.

Nothing under this package imports SGLang; it is unit-tested in milliseconds and wired into SGLang by
``sglang_faser.engine``.
"""
