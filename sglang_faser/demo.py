"""``python -m sglang_faser.demo``: the README's main job, end to end on the embedded default model.

Launches ``sglang_faser.launch_server`` with EAGLE speculative decoding on the tiny embedded model, sends a few
native ``/generate`` requests and one OpenAI ``/v1/chat/completions`` request, prints what came back with the
speculation statistics SGLang reports, and shuts the server down.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import requests

from sglang_faser.server_process import ServerProcess

PROMPTS = ["Beautiful is better than", "the lazy dog", "Errors should never pass"]
SPEC_FLAGS = [
    "--speculative-algorithm", "EAGLE",
    "--speculative-num-steps", "3",
    "--speculative-eagle-topk", "1",
    "--speculative-num-draft-tokens", "4",
]  # fmt: skip


def run(extra_args: list[str], max_new_tokens: int) -> None:
    log = Path(tempfile.gettempdir()) / "sglang-faser-demo-server.log"
    print(f"starting sglang_faser.launch_server (embedded tiny model, EAGLE); log: {log}", flush=True)
    with ServerProcess(SPEC_FLAGS + ["--max-total-tokens", "4096"] + extra_args, log_path=log) as server:
        print(f"server ready at {server.url}\n")
        for prompt in PROMPTS:
            body = {"text": prompt, "sampling_params": {"temperature": 0, "max_new_tokens": max_new_tokens}}
            out = requests.post(server.url + "/generate", json=body, timeout=120).json()
            meta = out["meta_info"]
            print(f"/generate  {prompt!r} -> {out['text']!r}")
            print(
                f"           tokens={meta['completion_tokens']} verify_steps={meta.get('spec_verify_ct')} "
                f"accept_length={meta.get('spec_accept_length')}"
            )
        chat = {
            "model": "default",
            "messages": [{"role": "user", "content": "Simple is better than"}],
            "max_tokens": max_new_tokens,
            "temperature": 0,
        }
        reply = requests.post(server.url + "/v1/chat/completions", json=chat, timeout=120).json()
        print(f"\n/v1/chat/completions -> {json.dumps(reply['choices'][0]['message'])}")
        print(f"usage: {reply['usage']}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-new-tokens", type=int, default=24)
    args, extra = parser.parse_known_args(argv)
    run(extra, args.max_new_tokens)
    return 0


if __name__ == "__main__":
    sys.exit(main())
