"""Model folders without weights, for ``--load-format dummy`` on the GPU machine (gpu-bringup.md §5b).

    python scripts/gpu_bringup/make_models.py OUT [--vocab 128256]

writes ``OUT/llama8b`` (a Llama-3-8B-shaped target), ``OUT/llama8b-eagle`` (its one-layer EAGLE head) and
``OUT/llama1b`` (a Llama-3.2-1B-shaped STANDALONE draft with the same vocabulary), each a ``config.json`` plus a
word-level tokenizer over ``<s> </s> <pad> <unk> w4 ... w{vocab-1}``. SGLang fills the weights with small random
numbers, so timings are real and acceptance is not: pair these with ``serve_bench.py --synthetic-acceptance``.
Needs only ``tokenizers`` and ``transformers``, which the GPU image has.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

LLAMA_8B = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
    "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
    "head_dim": 128, "hidden_act": "silu", "max_position_embeddings": 131072, "rms_norm_eps": 1e-5,
    "rope_theta": 500000.0, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
    "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                     "original_max_position_embeddings": 8192},
    "bos_token_id": 0, "eos_token_id": 1, "pad_token_id": 2,
}
EAGLE_HEAD = {**LLAMA_8B, "architectures": ["LlamaForCausalLMEagle"], "num_hidden_layers": 1}
LLAMA_1B = {**LLAMA_8B, "hidden_size": 2048, "intermediate_size": 8192, "num_hidden_layers": 16, "head_dim": 64,
            "tie_word_embeddings": True}
MODELS = {"llama8b": LLAMA_8B, "llama8b-eagle": EAGLE_HEAD, "llama1b": LLAMA_1B}
SPECIALS = ["<s>", "</s>", "<pad>", "<unk>"]


def tokenizer(vocab: int):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = {token: i for i, token in enumerate(SPECIALS)}
    words.update({f"w{i}": i for i in range(len(SPECIALS), vocab)})
    core = Tokenizer(models.WordLevel(words, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    core.decoder = decoders.WordPiece(prefix="##")  # joins words with spaces
    return PreTrainedTokenizerFast(tokenizer_object=core, bos_token="<s>", eos_token="</s>", pad_token="<pad>",
                                   unk_token="<unk>")


def write_models(out: Path, vocab: int = 128256) -> list[Path]:
    tok = tokenizer(vocab)
    folders = []
    for name, config in MODELS.items():
        folder = out / name
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "config.json").write_text(json.dumps({**config, "vocab_size": vocab}, indent=1) + "\n")
        tok.save_pretrained(folder)
        folders.append(folder)
    return folders


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--vocab", type=int, default=128256)
    args = parser.parse_args(argv)
    for folder in write_models(args.out, args.vocab):
        print(folder)
    return 0


if __name__ == "__main__":
    sys.exit(main())
