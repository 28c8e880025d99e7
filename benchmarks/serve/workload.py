"""Prompts and arrival times for the serving benchmark.

Arrivals follow the conventions of SGLang's and vLLM's serving benchmarks: Poisson (exponential gaps at the
request rate) or bursty (Gamma gaps with the same mean and a coefficient of variation > 1), from a fixed seed, or
a replayed trace.
"""

from __future__ import annotations

import argparse
import functools
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

DATA = Path(__file__).resolve().parent.parent / "data"
SETS = ("chat", "mtbench", "humaneval")
# standard: the three data sets; mixed / mixed-temp: acceptance differs per request inside one stream; cycles: the
# deep cycle pair's sure and doomed requests in one stream
PROMPT_SETS = ("standard", "mixed", "mixed-temp", "cycles")
SAMPLED_TEMPERATURE = 1.0  # mixed-temp's chat half


@dataclass(frozen=True)
class Request:
    at: float  # seconds after the start of the run
    prompt: str
    kind: str  # which prompt set it came from
    max_new_tokens: int
    temperature: float = 0.0  # 0: greedy (its output must equal no speculation's)
    custom_params: dict | None = None  # SGLang's per-request custom_params (FASER's {"faser": {...}} controls)


def load_prompts(kinds=SETS) -> list[tuple[str, str]]:
    prompts = []
    for kind in kinds:
        for line in (DATA / f"{kind}.jsonl").read_text().splitlines():
            if line.strip():
                prompts.append((kind, json.loads(line)["prompt"]))
    return prompts


@functools.lru_cache(maxsize=1)
def _code_lines() -> tuple[str, ...]:
    return tuple(line.strip() for _, prompt in load_prompts(("humaneval",)) for line in prompt.splitlines()
                 if len(line.strip()) > 20)


def mixed_prompts(n: int = 64, seed: int = 0) -> list[tuple[str, str, float]]:
    """Prompts whose drafts the embedded pair accepts differently, half and half in one stream, all greedy.

    ``repeat``: a line of real code said over and over (the target continues the loop; drafts mostly pass, about 4
    tokens per verify step at length 5); ``noise``: random letter strings (about 2.4 tokens per step at length 5:
    the small pair guesses letter soup better than the name suggests).
    """
    rng = np.random.default_rng(seed)
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    prompts = []
    for i in range(n):
        if i % 2 == 0:
            prompts.append(("repeat", _repeated_code_line(rng), 0.0))
        else:
            words = ["".join(rng.choice(letters, int(rng.integers(2, 9)))) for _ in range(40)]
            prompts.append(("noise", " ".join(words), 0.0))
    return prompts


def mixed_temperature_prompts(n: int = 64, seed: int = 0) -> list[tuple[str, str, float]]:
    """Greedy code completion and sampled chat in one stream, the mix where one length for all must be wrong.

    ``repeat`` (greedy, as in ``mixed_prompts``): about 4 tokens per verify step at length 5; ``sampled``: ShareGPT
    prompts at temperature 1, where the chain's drafts rarely survive speculative sampling (about 1.3 tokens per
    step at length 5). Only the greedy half can be compared token for token with no speculation.
    """
    rng = np.random.default_rng(seed)
    chat = [prompt for _, prompt in load_prompts(("chat",))]
    return [("repeat", _repeated_code_line(rng), 0.0) if i % 2 == 0 else
            ("sampled", chat[int(rng.integers(len(chat)))], SAMPLED_TEMPERATURE) for i in range(n)]


def cycle_prompts(n: int = 64, seed: int = 0) -> list[tuple[str, str, float]]:
    """The cycle pairs' extremes in one stream, half and half, all greedy (``sglang_faser/models/tiny.py``).

    A sentence of the Zen of Python's words, then a trigger character: the cycle pair's target walks the cycle of
    the prompt's last token, so ``sure`` prompts end on a token of the cycle the draft walks right (every draft
    passes) and ``doomed`` ones on the other (every draft fails). Triggers are tokens that come back as themselves
    when the text is tokenized again, printable ones only.
    """
    from transformers import AutoTokenizer

    from sglang_faser.models.tiny import CYCLE_SPLIT, ensure_tiny_suite

    suite = ensure_tiny_suite()
    tok = AutoTokenizer.from_pretrained(suite.deep_cycle_target)
    words = "beautiful is better than ugly explicit implicit simple complex flat nested sparse dense".split()
    rng = np.random.default_rng(seed)
    triggers: dict[str, list[str]] = {"sure": [], "doomed": []}
    for token in range(3, tok.vocab_size):
        text = tok.decode([token])
        if text.strip() and text.isprintable() and tok(f"{words[0]} {text}").input_ids[-1] == token:
            triggers["sure" if token < CYCLE_SPLIT else "doomed"].append(text)
    prompts = []
    for i in range(n):
        kind = "sure" if i % 2 == 0 else "doomed"
        sentence = " ".join(rng.choice(words, int(rng.integers(8, 24))))
        prompts.append((kind, f"{sentence} {triggers[kind][int(rng.integers(len(triggers[kind])))]}", 0.0))
    return prompts


def _repeated_code_line(rng) -> str:
    lines = _code_lines()
    line = lines[int(rng.integers(len(lines)))]
    return "\n".join([line] * 8) + "\n"


def smollm2_chat_template():
    """Each prompt as one user turn in SmolLM2's chat template (an instruct model is served that way)."""
    from transformers import AutoTokenizer

    from sglang_faser.models.smollm2 import ensure_smollm2

    tok = AutoTokenizer.from_pretrained(ensure_smollm2())
    return lambda prompt: tok.apply_chat_template([{"role": "user", "content": prompt}], tokenize=False,
                                                  add_generation_prompt=True)


def arrival_times(n: int, rate: float, process: str = "poisson", cv: float = 2.0, seed: int = 0) -> np.ndarray:
    """Cumulative arrival times of ``n`` requests at ``rate`` requests/s (``inf``: all at once)."""
    if n == 0:
        return np.zeros(0)
    if rate == float("inf"):
        return np.zeros(n)
    rng = np.random.default_rng(seed)
    if process == "poisson":
        gaps = rng.exponential(1.0 / rate, n)
    elif process == "gamma":  # shape k = 1 / cv^2 keeps the mean gap 1 / rate; cv > 1 is burstier than Poisson
        shape = 1.0 / cv**2
        gaps = rng.gamma(shape, 1.0 / (rate * shape), n)
    else:
        raise ValueError(f"unknown arrival process {process!r} (poisson, gamma)")
    return np.cumsum(gaps) - gaps[0]


def build(n: int, rate: float, process: str, max_new_tokens: int, seed: int = 0, cv: float = 2.0,
          prompt_set: str = "standard", template=None, output_spread: float = 0.0) -> list[Request]:
    """``template``: a function that wraps each prompt (an instruct model's chat template), or None.

    ``output_spread``: each request's output length drawn uniformly from ``max_new_tokens`` x [1 - s, 1 + s]
    (seeded: every configuration serves the same lengths). With one length for all (0), requests that decode one
    token a step finish together, and a closed loop replaces them with one batched prefill: a lockstep real traffic
    does not have, which favours configurations that keep it (at 16 in flight on CPU, two runs: no speculation ran
    1.06-1.12x FASER with every request at 64 tokens and 0.98-1.00x with 32-96)."""
    if prompt_set == "mixed":
        prompts = mixed_prompts(seed=seed)
    elif prompt_set == "mixed-temp":
        prompts = mixed_temperature_prompts(seed=seed)
    elif prompt_set == "cycles":
        prompts = cycle_prompts(seed=seed)
    else:
        prompts = [(kind, prompt, 0.0) for kind, prompt in load_prompts()]
    if template is not None:
        prompts = [(kind, template(prompt), temp) for kind, prompt, temp in prompts]
    rng = np.random.default_rng(seed + 1)
    picks = rng.integers(0, len(prompts), n)
    times = arrival_times(n, rate, process, cv, seed)
    lengths = output_lengths(n, max_new_tokens, output_spread, seed)
    return [Request(float(t), prompts[i][1], prompts[i][0], length, prompts[i][2])
            for t, i, length in zip(times, picks, lengths)]


def add_output_spread_flag(parser) -> None:
    """``--output-spread S`` (``build``'s ``output_spread``), checked when the command line is parsed."""
    def spread(text: str) -> float:
        value = float(text)
        if not 0.0 <= value < 1.0:
            raise argparse.ArgumentTypeError(f"must be in [0, 1), got {value}")
        return value

    parser.add_argument("--output-spread", type=spread, default=0.0, metavar="S",
                        help="output lengths uniform over max-new-tokens x [1 - S, 1 + S] (default 0: all equal)")


def output_lengths(n: int, max_new_tokens: int, spread: float, seed: int = 0) -> list[int]:
    """``n`` output lengths: all ``max_new_tokens``, or uniform over ``max_new_tokens`` x [1 - spread, 1 + spread]."""
    if not 0.0 <= spread < 1.0:
        raise ValueError(f"output spread must be in [0, 1), got {spread}")
    if spread == 0.0:
        return [max_new_tokens] * n
    low, high = max(1, round(max_new_tokens * (1 - spread))), round(max_new_tokens * (1 + spread))
    return [int(x) for x in np.random.default_rng(seed + 2).integers(low, high + 1, n)]


def replay(path: str | Path, default_max_new_tokens: int) -> list[Request]:
    requests = []
    for line in Path(path).read_text().splitlines():
        if line.strip():
            row = json.loads(line)
            requests.append(Request(float(row["t"]), row["prompt"], row.get("kind", "trace"),
                                    int(row.get("max_new_tokens", default_max_new_tokens))))
    return sorted(requests, key=lambda r: r.at)
