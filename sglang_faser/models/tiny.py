"""Tiny random Llama checkpoints, made offline in seconds, for tests and the embedded default.

The recipe is the one recorded in ``shared/docs/sglang-on-cpu.md`` §7: a byte-level BPE trained on synthetic
sentences built from the Zen of Python, a 2-layer Llama target, a 1-layer STANDALONE draft, an EAGLE head in the
layout SGLang's ``LlamaForCausalLMEagle`` loads, and the "context-free" target whose ``o_proj`` weights are zero.
With attention switched off, the next token depends only on the current token, so a draft with the same weights
agrees with the target everywhere: the 100 % acceptance fixture.

Everything is seeded; a suite is written to a temporary directory and renamed into place, so concurrent callers
(pytest workers, two launchers) never see a half-written checkpoint.
"""

from __future__ import annotations

import codecs
import contextlib
import io
import json
import os
import random
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

SUITE_VERSION = "tiny-v3"
VOCAB_SIZE = 512
CHAT_TEMPLATE = (
    "{% for message in messages %}{{ message['role'] }}: {{ message['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}assistant:{% endif %}"
)


@dataclass(frozen=True)
class TinySuite:
    """Paths of one generated suite; every directory loads with HF ``from_pretrained`` and SGLang."""

    root: Path

    @property
    def target(self) -> Path:
        return self.root / "tiny-llama"

    @property
    def eagle(self) -> Path:
        return self.root / "tiny-llama-eagle"

    @property
    def standalone(self) -> Path:
        return self.root / "tiny-llama-draft"

    @property
    def context_free(self) -> Path:
        return self.root / "tiny-llama-noattn"

    @property
    def cycle_target(self) -> Path:
        return self.root / "tiny-llama-cycles"

    @property
    def cycle_draft(self) -> Path:
        return self.root / "tiny-llama-cycles-draft"

    @property
    def deep_cycle_target(self) -> Path:
        """The cycle target with DEEP_CYCLE_LAYERS layers: a target step costs several draft steps, as in serving."""
        return self.root / "tiny-llama-cycles-deep"

    @property
    def small_cycle_draft(self) -> Path:
        """The cycle draft with one layer, the deep target's draft."""
        return self.root / "tiny-llama-cycles-draft-1l"

    def complete(self) -> bool:
        return (self.root / "DONE").exists()


def default_cache_dir() -> Path:
    base = os.environ.get("SGLANG_FASER_CACHE") or os.path.join(Path.home(), ".cache", "sglang-faser")
    return Path(base) / "models"


def ensure_tiny_suite(cache_dir: Path | None = None) -> TinySuite:
    """Return the cached suite, building it first if it is missing (about 10 s on 2 cores)."""
    cache_dir = Path(cache_dir) if cache_dir else default_cache_dir()
    suite = TinySuite(cache_dir / SUITE_VERSION)
    if suite.complete():
        return suite
    cache_dir.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=SUITE_VERSION + ".", dir=cache_dir))
    try:
        _build_suite(TinySuite(staging))
        (staging / "DONE").write_text(SUITE_VERSION + "\n")
        try:
            staging.rename(suite.root)
        except OSError:  # another process won the race; its suite is equivalent
            if not suite.complete():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return suite


def _zen_words() -> list[str]:
    with contextlib.redirect_stdout(io.StringIO()):  # importing `this` prints the Zen
        import this

    text = codecs.decode(this.s, "rot13")
    words = [w.strip(".,!*-'\"").lower() for w in text.split()]
    extra = "the quick brown fox jumps over lazy dog code python token draft target verify fast slow".split()
    return sorted({w for w in words + extra if w})


def _training_lines(n_lines: int = 2000, words_per_line: int = 12) -> list[str]:
    rng = random.Random(0)
    words = _zen_words()
    return [" ".join(rng.choice(words) for _ in range(words_per_line)) for _ in range(n_lines)]


def _build_tokenizer(out_dirs: list[Path]) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=["<s>", "</s>", "<pad>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_training_lines(), trainer=trainer)
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", 0)]
    )
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>"
    )
    fast.chat_template = CHAT_TEMPLATE
    for d in out_dirs:
        fast.save_pretrained(d)


def _llama_config(num_layers: int):
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=VOCAB_SIZE,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=num_layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=2048,
        bos_token_id=0,
        eos_token_id=1,
        pad_token_id=2,
        tie_word_embeddings=False,
        torch_dtype="float32",
    )


def _random_llama(num_layers: int, seed: int):
    import torch
    from transformers import LlamaForCausalLM

    torch.manual_seed(seed)
    return LlamaForCausalLM(_llama_config(num_layers)).to(torch.float32).eval()


def _write_eagle_head(target_dir: Path, out: Path) -> None:
    """An EAGLE-1 head as SGLang's ``LlamaForCausalLMEagle`` expects it (sglang-on-cpu.md §7)."""
    import torch
    from safetensors.torch import save_file

    config = json.loads((target_dir / "config.json").read_text())
    config["architectures"] = ["LlamaForCausalLMEagle"]
    config["num_hidden_layers"] = 1
    (out / "config.json").write_text(json.dumps(config, indent=2))

    donor = _random_llama(num_layers=1, seed=2).state_dict()
    hidden = config["hidden_size"]
    weights = {}
    for name, tensor in donor.items():
        if name.startswith("model.layers.0.") and "input_layernorm" not in name:
            weights[name.removeprefix("model.")] = tensor.contiguous()
    weights["embed_tokens.weight"] = donor["model.embed_tokens.weight"].contiguous()
    weights["lm_head.weight"] = donor["lm_head.weight"].contiguous()
    gen = torch.Generator().manual_seed(3)
    weights["fc.weight"] = torch.randn(hidden, 2 * hidden, generator=gen) * 0.02
    weights["fc.bias"] = torch.zeros(hidden)
    save_file(weights, str(out / "model.safetensors"), metadata={"format": "pt"})


def _build_suite(suite: TinySuite) -> None:
    import torch

    dirs = [suite.target, suite.eagle, suite.standalone, suite.context_free, suite.cycle_target, suite.cycle_draft,
            suite.deep_cycle_target, suite.small_cycle_draft]
    for d in dirs:
        d.mkdir(parents=True)
    _build_tokenizer(dirs)

    target = _random_llama(num_layers=2, seed=0)
    target.save_pretrained(suite.target, safe_serialization=True)

    _random_llama(num_layers=1, seed=1).save_pretrained(suite.standalone, safe_serialization=True)

    with torch.no_grad():
        for layer in target.model.layers:
            layer.self_attn.o_proj.weight.zero_()
    target.save_pretrained(suite.context_free, safe_serialization=True)

    _write_eagle_head(suite.target, suite.eagle)
    _write_cycle_pair(suite)


CYCLE_SPLIT = 258  # tokens [3, 258) form cycle A, [258, VOCAB_SIZE) cycle B
DEEP_CYCLE_LAYERS = 12


def cycle_successor(token: int, shift: int = 1) -> int:
    """The cycle pair's next-token map: a step along the cycle the token belongs to."""
    low, high = (3, CYCLE_SPLIT) if token < CYCLE_SPLIT else (CYCLE_SPLIT, VOCAB_SIZE)
    return low + (token - low + shift) % (high - low)


def _write_cycle_pair(suite: TinySuite) -> None:
    """A context-free target whose greedy map walks one of two disjoint cycles, and a draft right on one only.

    Attention and MLP outputs are zeroed, so the final hidden state is the token's own embedding e_x; the LM head
    row of token y is the normalised embedding of its cycle predecessor, so argmax picks y = successor(x)
    (random 64-d embeddings are far from parallel). The draft's head walks cycle B two steps at a time, so on
    cycle A every draft is accepted and on cycle B every draft is rejected: one batch, sure and hopeless requests.
    The layers compute (and cost) what any layer does but add nothing, so the same maps come at any depth: the
    2-layer pair (a draft step costs a target step) and the deep pair (a DEEP_CYCLE_LAYERS-layer target, a 1-layer
    draft), whose drafts are cheap beside the target as in serving, so that speculation can pay at batch 1.
    """
    import torch

    embed = None
    models = ((suite.cycle_target, 2, 1), (suite.cycle_draft, 2, 2),
              (suite.deep_cycle_target, DEEP_CYCLE_LAYERS, 1), (suite.small_cycle_draft, 1, 2))
    for directory, num_layers, shift_b in models:
        model = _random_llama(num_layers=num_layers, seed=4)
        with torch.no_grad():
            for layer in model.model.layers:
                layer.self_attn.o_proj.weight.zero_()
                layer.mlp.down_proj.weight.zero_()
            if embed is None:
                embed = model.model.embed_tokens.weight.clone()
            model.model.embed_tokens.weight.copy_(embed)
            unit = embed / embed.norm(dim=1, keepdim=True)
            head = torch.zeros_like(unit)  # special tokens are never predicted
            for x in range(3, VOCAB_SIZE):
                head[cycle_successor(x, 1 if x < CYCLE_SPLIT else shift_b)] = unit[x]
            model.lm_head.weight.copy_(head * 20.0)
        directory.mkdir(parents=True, exist_ok=True)
        model.save_pretrained(directory, safe_serialization=True)
