"""Send a workload to a server at its arrival times and measure each request (streaming /generate)."""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass

import aiohttp

from .workload import Request


@dataclass
class Result:
    kind: str
    ok: bool
    ttft: float = 0.0  # seconds to the first streamed token
    e2e: float = 0.0  # seconds to the last
    output_tokens: int = 0
    accept_length: float | None = None  # SGLang's spec_accept_length (tokens per verify step)
    mean_cap: float | None = None  # mean per-step speculative length FASER gave this request
    error: str = ""
    text: str = ""  # the whole output (SGLang streams cumulative text), to compare configurations
    greedy: bool = True  # sampled outputs differ between runs by design: only greedy ones are compared

    @property
    def tpot(self) -> float:
        return (self.e2e - self.ttft) / (self.output_tokens - 1) if self.output_tokens > 1 else 0.0


async def _one(session, url: str, request: Request, start: float, progress, slots: asyncio.Semaphore | None
               ) -> Result:
    await asyncio.sleep(max(0.0, start + request.at - time.perf_counter()))
    if slots is None:
        return await _send(session, url, request, progress)
    async with slots:  # at most that many in flight: arrivals wait for a slot (bench_serving's --max-concurrency)
        return await _send(session, url, request, progress)


async def _send(session, url: str, request: Request, progress) -> Result:
    sent = time.perf_counter()
    body = {"text": request.prompt, "stream": True,
            "sampling_params": {"temperature": request.temperature, "max_new_tokens": request.max_new_tokens,
                                "ignore_eos": True}}
    if request.custom_params is not None:
        body["sampling_params"]["custom_params"] = request.custom_params
    result = Result(request.kind, ok=False, greedy=request.temperature == 0)
    try:
        async with session.post(url + "/generate", json=body) as response:
            if response.status != 200:
                result.error = f"HTTP {response.status}"
                return result
            last = None
            async for raw in response.content:
                line = raw.strip()
                if not line.startswith(b"data:") or line == b"data: [DONE]":
                    continue
                if last is None:
                    result.ttft = time.perf_counter() - sent
                last = json.loads(line[5:])
            result.e2e = time.perf_counter() - sent
        meta = last["meta_info"]
        result.output_tokens = int(meta["completion_tokens"])
        result.text = last.get("text", "")
        result.accept_length = meta.get("spec_accept_length")
        histogram = meta.get("spec_cap_lens_histogram")
        if histogram and sum(histogram):
            result.mean_cap = sum(k * n for k, n in enumerate(histogram)) / sum(histogram)
        result.ok = True
    except (aiohttp.ClientError, asyncio.TimeoutError, KeyError, ValueError) as exc:
        result.error = repr(exc)
    finally:
        if progress is not None:
            progress.update(1)
    return result


async def _run(url: str, requests: list[Request], progress, timeout_s: float,
               max_concurrency: int | None) -> tuple[list[Result], float]:
    timeout = aiohttp.ClientTimeout(total=timeout_s)
    slots = asyncio.Semaphore(max_concurrency) if max_concurrency else None
    async with aiohttp.ClientSession(timeout=timeout) as session:
        start = time.perf_counter()
        results = await asyncio.gather(*(_one(session, url, r, start, progress, slots) for r in requests))
        return list(results), time.perf_counter() - start


def drive(url: str, requests: list[Request], progress=None, timeout_s: float = 1800.0,
          max_concurrency: int | None = None) -> tuple[list[Result], float]:
    """Results in request order, and the wall time of the whole run; ``max_concurrency``: at most that many
    requests in flight (with ``rate = inf``, a closed loop: a steady batch of that size until the queue drains)."""
    return asyncio.run(_run(url, requests, progress, timeout_s, max_concurrency))
