"""The official ``openai`` client against sglang-faser, including FASER's per-request controls.

    python examples/openai_client.py --url http://127.0.0.1:30000

``extra_body={"custom_params": {"faser": {"max_len": 0}}}`` turns speculation off for one request;
``{"faser": {"latency_class": "critical"}}`` keeps it speculating under load (README, "Per-request controls").
"""

from __future__ import annotations

import argparse

import openai


def run_all(url: str) -> dict:
    client = openai.OpenAI(base_url=url + "/v1", api_key="none")
    out = {}
    completion = client.completions.create(model="default", prompt="Now is better than", max_tokens=16,
                                           temperature=0, logprobs=2, stop=["\n\n"])
    out["completion"] = completion.choices[0].text
    out["completion_logprobs"] = completion.choices[0].logprobs.tokens
    chat = client.chat.completions.create(model="default", messages=[{"role": "user", "content": "Hello"}],
                                          max_tokens=16, temperature=0, n=2)
    out["chat_n2"] = [choice.message.content for choice in chat.choices]
    stream = client.chat.completions.create(model="default", messages=[{"role": "user", "content": "Hi"}],
                                            max_tokens=16, temperature=0, stream=True)
    out["chat_stream"] = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
    stream = client.completions.create(model="default", prompt="Simple is better than", max_tokens=16,
                                       temperature=0, stream=True)
    out["completion_stream"] = "".join(chunk.choices[0].text for chunk in stream if chunk.choices)
    no_spec = client.completions.create(model="default", prompt="Readability counts", max_tokens=16,
                                        temperature=0, extra_body={"custom_params": {"faser": {"max_len": 0}}})
    out["no_speculation_for_this_request"] = no_spec.choices[0].text
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="http://127.0.0.1:30000")
    for name, value in run_all(parser.parse_args().url).items():
        print(f"{name}: {value!r}")


if __name__ == "__main__":
    main()
