"""SGLang frontend (DSL) programs that run unchanged against ``python -m sglang_faser.launch_server``.

    python -m sglang_faser.launch_server --speculative-algorithm EAGLE --speculative-num-steps 3 \\
        --speculative-eagle-topk 1 --speculative-num-draft-tokens 4 --port 30000 &
    python examples/dsl_programs.py --url http://127.0.0.1:30000

Every ``gen`` is greedy (temperature 0) so that the output is reproducible: FASER's output is then exactly the
target model's own (tests/engine/test_frontend_clients.py runs these programs against servers with FASER on and off
and compares the texts). With the embedded tiny model the texts are gibberish; the programs show the features.
"""

from __future__ import annotations

import argparse
import json

import sglang as sgl

GREEDY = dict(temperature=0)


@sgl.function
def stop_and_regex(s, topic):
    s += "Topic: " + topic + "\n"
    s += "Summary:" + sgl.gen("summary", max_tokens=24, stop=[".", "\n"], **GREEDY)
    s += "\nYear: " + sgl.gen("year", max_tokens=8, regex=r"(19|20)[0-9]{2}", **GREEDY)


@sgl.function
def choose(s, question):
    s += question + " Answer: " + sgl.select("answer", choices=["yes", "no", "maybe"], temperature=0)


@sgl.function
def fork_join(s, topic):
    s += "Three facts about " + topic + ":\n"
    forks = s.fork(3)
    for i, f in enumerate(forks):
        f += f"Fact {i + 1}:" + sgl.gen("fact", max_tokens=12, stop="\n", **GREEDY)
    forks.join()
    s += "All facts: " + " | ".join(f["fact"] for f in forks)


@sgl.function
def chat(s, question):
    s += sgl.system("You are terse.")
    s += sgl.user(question)
    s += sgl.assistant(sgl.gen("first", max_tokens=16, **GREEDY))
    s += sgl.user("And then?")
    s += sgl.assistant(sgl.gen("second", max_tokens=16, **GREEDY))


@sgl.function
def stream_me(s, prompt):
    s += prompt + sgl.gen("text", max_tokens=24, **GREEDY)


def run_all(url: str) -> dict:
    """Run every program once; returns {name: output} (the tests compare these across servers)."""
    sgl.set_default_backend(sgl.RuntimeEndpoint(url))
    out = {}
    state = stop_and_regex.run(topic="speculative decoding")
    out["stop_and_regex"] = {"summary": state["summary"], "year": state["year"]}
    out["select"] = choose.run(question="Is simple better than complex?")["answer"]
    out["fork_join"] = fork_join.run(topic="the lazy dog").text()
    state = chat.run(question="What is FASER?")
    out["chat"] = [state["first"], state["second"]]
    states = stream_me.run_batch([{"prompt": p} for p in ("Beautiful is", "Explicit is", "Simple is")])
    out["run_batch"] = [st["text"] for st in states]
    streamed = stream_me.run(prompt="Flat is better than", stream=True)
    out["stream"] = "".join(streamed.text_iter("text"))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="http://127.0.0.1:30000")
    print(json.dumps(run_all(parser.parse_args().url), indent=1))


if __name__ == "__main__":
    main()
