"""Shared fixtures: tiny models made once per run, HF greedy references, and engines shared across tests.

SGLang reads ``SGLANG_USE_CPU_ENGINE`` when it is first imported, so it is set here, before any test module
imports SGLang. Engines take ~20-35 s to start on 2 cores: ``engine_pool`` keeps the last configuration alive
until a test asks for another one, so tests that share a configuration should sit together.

Only one engine may live at a time: ``Engine.shutdown()`` kills *every* child of the calling process
(``kill_process_tree(os.getpid())``, sglang/srt/entrypoints/engine.py), which takes other engines' schedulers and
any server subprocess a test started with it, and SGLang's watchdog then kills the test process.
"""

from __future__ import annotations

import os
from collections import OrderedDict

import pytest

from sglang_faser import cpu_bootstrap

cpu_bootstrap.install()
ON_CPU = cpu_bootstrap.using_standin()
if ON_CPU:
    os.environ.setdefault("SGLANG_USE_CPU_ENGINE", "1")

MAX_ALIVE = 1


@pytest.fixture(scope="session")
def faser_cache(tmp_path_factory):
    """A per-run SGLANG_FASER_CACHE, exported so that launched servers reuse the same tiny models."""
    cache = tmp_path_factory.mktemp("faser-cache")
    os.environ["SGLANG_FASER_CACHE"] = str(cache)
    return cache


@pytest.fixture(scope="session")
def tiny_suite(faser_cache):
    from sglang_faser.models.tiny import default_cache_dir, ensure_tiny_suite

    return ensure_tiny_suite(default_cache_dir())


@pytest.fixture(scope="session")
def embedded_target(tiny_suite):
    """What the launcher serves with no --model-path: the shipped small pair's target (else the tiny target)."""
    from sglang_faser.models.small_pair import embedded_default

    return embedded_default()[0]


@pytest.fixture(scope="session")
def embedded_tokenizer(embedded_target):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(embedded_target)


@pytest.fixture(scope="session")
def tokenizer(tiny_suite):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_suite.target)


@pytest.fixture(scope="session")
def hf_greedy():
    """``hf_greedy(model_dir, input_ids, n)``: the target's own greedy continuation, computed with HF."""
    import torch
    from transformers import AutoModelForCausalLM

    models = {}
    cache = {}

    def run(model_dir, input_ids: list[int], max_new_tokens: int) -> list[int]:
        key = (str(model_dir), tuple(input_ids), max_new_tokens)
        if key not in cache:
            if str(model_dir) not in models:
                models[str(model_dir)] = AutoModelForCausalLM.from_pretrained(
                    model_dir, dtype=torch.float32
                ).eval()
            out = models[str(model_dir)].generate(
                torch.tensor([input_ids]),
                max_new_tokens=max_new_tokens,
                do_sample=False,
                eos_token_id=None,
                pad_token_id=2,
            )
            cache[key] = out[0, len(input_ids) :].tolist()
        return cache[key]

    return run


class EnginePool:
    def __init__(self, trace_dir):
        self._engines: OrderedDict[str, object] = OrderedDict()
        self._trace_dir = trace_dir

    def trace_path(self, key: str):
        """Where a FASER engine's step trace goes (``SGLANG_FASER_STEP_TRACE``, on for every FASER engine here)."""
        return self._trace_dir / f"{key}.jsonl"

    def get(self, key: str, faser=None, **kwargs):
        """The engine for ``key``; ``faser`` (a FaserConfig) turns the FASER worker on, as the launcher does."""
        if key in self._engines:
            self._engines.move_to_end(key)
            return self._engines[key]
        while len(self._engines) >= MAX_ALIVE:
            _, old = self._engines.popitem(last=False)
            old.shutdown()
        import sglang as sgl

        settings = dict(
            device="cpu" if ON_CPU else "cuda",
            attention_backend="intel_amx" if ON_CPU else None,
            dtype="float32",
            max_total_tokens=4096,
            disable_cuda_graph=True,
            log_level="warning",
            random_seed=0,
            sleep_on_idle=True,  # an idle engine kept alive by the pool must not spin a core the next test needs
        )
        settings.update(kwargs)
        from sglang_faser.engine.step_trace import ENV_VAR as TRACE_VAR
        from sglang_faser.spec.config import ENV_VAR

        if faser is None:
            os.environ.pop(ENV_VAR, None)
            os.environ.pop(TRACE_VAR, None)
        else:
            os.environ[ENV_VAR] = faser.to_json()  # inherited by the spawned scheduler
            os.environ[TRACE_VAR] = str(self.trace_path(key))
        self._engines[key] = sgl.Engine(**{k: v for k, v in settings.items() if v is not None})
        return self._engines[key]

    def close(self):
        while self._engines:
            _, engine = self._engines.popitem()
            engine.shutdown()


@pytest.fixture(scope="session")
def engine_pool(tmp_path_factory):
    pool = EnginePool(tmp_path_factory.mktemp("step-traces"))
    yield pool
    pool.close()
