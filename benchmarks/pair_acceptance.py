"""Tokens per verify step of a target and its drafts, by prompt kind, draft kind and speculative length.

Shows that the shipped pair (``sglang_faser/models/small_pair``) has real, request-dependent acceptance: one real
server per (algorithm, k) with FASER off (SGLang's own fixed-length speculation), greedy requests from each prompt
set sent one at a time, SGLang's ``spec_accept_length`` (accepted drafts + the bonus token per verify) averaged per
set. Writes ``benchmarks/results/pair_acceptance.{json,md}``.

    .venv/bin/python benchmarks/pair_acceptance.py [--per-kind 12] [--lengths 1 3 5]
    .venv/bin/python benchmarks/pair_acceptance.py --model smollm2   # SmolLM2-135M-Instruct, chat-templated prompts
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path

import requests
from tqdm import tqdm

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.serve.workload import load_prompts, smollm2_chat_template  # noqa: E402
from sglang_faser.server_process import ServerProcess  # noqa: E402

RESULTS = Path(__file__).parent / "results"
KINDS = {"humaneval": "code (HumanEval)", "mtbench": "MT-Bench questions", "chat": "ShareGPT chat",
         "shakespeare": "Shakespeare (prose seen in training)"}
SHAKESPEARE = ["ROMEO:\n", "KING HENRY:\nWhat say you, lords", "HAMLET:\nTo be, or not to be", "First Citizen:\n",
               "MACBETH:\nIs this a dagger", "JULIET:\nO Romeo, Romeo!", "LEAR:\nBlow, winds", "PORTIA:\n",
               "OTHELLO:\nIt is the cause", "PROSPERO:\nOur revels now are ended", "BRUTUS:\n", "VIOLA:\n"]


def prompts_by_kind(per_kind: int, template=None) -> dict[str, list[str]]:
    """``template``: an instruct model's chat template (then no Shakespeare openings, which only suit the pair)."""
    out: dict[str, list[str]] = {kind: [] for kind in KINDS}
    for kind, prompt in load_prompts():
        if len(out[kind]) < per_kind:
            out[kind].append(prompt if template is None else template(prompt))
    if template is None:
        out["shakespeare"] = SHAKESPEARE[:per_kind]
    else:
        del out["shakespeare"]
    return out


def measure(algorithm: str, k: int, prompts: dict[str, list[str]], max_new: int, log: Path, progress,
            model: list[str]) -> dict:
    flags = model + ["--speculative-algorithm", algorithm, "--speculative-num-steps", str(k), "--speculative-eagle-topk",
             "1", "--speculative-num-draft-tokens", str(k + 1), "--faser-mode", "stock",
             "--max-total-tokens", "8192"]
    rows = {}
    with ServerProcess(flags, log_path=log) as server:
        for kind, texts in prompts.items():
            lengths = []
            for text in texts:
                body = {"text": text, "sampling_params": {"temperature": 0, "max_new_tokens": max_new}}
                meta = requests.post(server.url + "/generate", json=body, timeout=600).json()["meta_info"]
                if meta.get("spec_verify_ct"):  # the first token comes from prefill, not from a verify step
                    lengths.append((meta["completion_tokens"] - 1) / meta["spec_verify_ct"])
                progress.update(1)
            rows[kind] = {"tokens_per_verify": statistics.fmean(lengths) if lengths else None,
                          "min": min(lengths, default=None), "max": max(lengths, default=None), "n": len(lengths)}
    return rows


def markdown(results: dict, meta: dict) -> str:
    lines = [f"# Acceptance of {meta['model']}", "", f"`{json.dumps(meta)}`", "",
             "Tokens per verify step (accepted drafts + 1), mean over requests (min-max), greedy, batch 1.", ""]
    for algorithm, by_k in results.items():
        ks = sorted(by_k, key=int)
        lines += [f"## {algorithm}", "", "| prompts | " + " | ".join(f"k = {k}" for k in ks) + " |",
                  "|---|" + "---|" * len(ks)]
        for kind, label in KINDS.items():
            if kind not in by_k[ks[0]]:
                continue
            cells = []
            for k in ks:
                row = by_k[k][kind]
                cells.append("-" if row["tokens_per_verify"] is None else
                             f"{row['tokens_per_verify']:.2f} ({row['min']:.2f}-{row['max']:.2f})")
            lines.append(f"| {label} | " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-kind", type=int, default=12)
    parser.add_argument("--lengths", type=int, nargs="+", default=[1, 3, 5])
    parser.add_argument("--algorithms", nargs="+", default=["EAGLE", "STANDALONE"])
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--model", choices=["embedded", "smollm2"], default="embedded")
    args = parser.parse_args(argv)
    smollm2 = args.model == "smollm2"
    prompts = prompts_by_kind(args.per_kind, smollm2_chat_template() if smollm2 else None)
    model = ["--model-path", "smollm2"] if smollm2 else []
    stem = "pair_acceptance_smollm2" if smollm2 else "pair_acceptance"
    began = time.time()
    results: dict = {}
    total = len(args.algorithms) * len(args.lengths) * sum(map(len, prompts.values()))
    with tqdm(total=total, desc="requests", unit="req") as progress:
        for algorithm in args.algorithms:
            for k in args.lengths:
                progress.set_postfix_str(f"{algorithm} k={k}")
                log = RESULTS / "logs" / f"{stem}_{algorithm}_{k}.log"
                log.parent.mkdir(parents=True, exist_ok=True)
                results.setdefault(algorithm, {})[str(k)] = measure(algorithm, k, prompts, args.max_new_tokens,
                                                                    log, progress, model)
    meta = {"machine": platform.machine(),
            "model": "SmolLM2-135M-Instruct + sglang_faser/models/smollm2_drafts" if smollm2
            else "sglang_faser/models/small_pair", "per_kind": args.per_kind,
            "max_new_tokens": args.max_new_tokens, "minutes": round((time.time() - began) / 60, 1)}
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{stem}.json").write_text(json.dumps({"meta": meta, "results": results}, indent=1) + "\n")
    text = markdown(results, meta)
    (RESULTS / f"{stem}.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
