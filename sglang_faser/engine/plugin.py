"""sglang-faser's entry point in SGLang's ``sglang.srt.plugins`` group.

SGLang calls :func:`register` in every process it starts (launcher, ``sgl.Engine``, scheduler and detokenizer
children; sglang-0.5.23-map.md §8.1), before server arguments are resolved in the main process. Today it makes the
CPU path work; the FASER worker hooks join it in the per-request-lengths work.
"""

from __future__ import annotations

import logging

logger = logging.getLogger(__name__)


def register() -> None:
    from sglang_faser import cpu_bootstrap

    cpu_bootstrap.install()
    if cpu_bootstrap.using_standin():
        from sglang_faser.engine import touchpoints

        touchpoints.report_amx_on_cpu()
        logger.info("sglang-faser: CPU stand-in for sgl_kernel active; intel_amx attention enabled")
