"""Build a tiny, randomly initialised Qwen2-architecture chat model with its own tokenizer.

The tokenizer is a byte-level BPE trained with `tokenizers` on chat-formatted arithmetic
text. It uses Qwen2's pre-tokenization (a regex split that puts every digit in its own
token, then ByteLevel without its own regex): transformers 5 loads a `qwen2` folder as
`Qwen2Tokenizer`, which rebuilds exactly that pre-tokenizer, so ids at training and at load
time agree (checked in tests). One digit per token also makes arithmetic learnable.

Usage (the first step of scripts/build_tiny_model.sh):
    python -m hybridrl.models.tiny --out build/tiny-init
"""

from __future__ import annotations

import argparse
import random

import torch

QWEN2_SPLIT = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"""
               r"""\s*[\r\n]+|\s+(?!\S)|\s+""")
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHATML_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def corpus(seed: int = 0, size: int = 4000) -> list[str]:
    """Chat-formatted arithmetic text for training the BPE merges."""
    rng = random.Random(seed)
    lines = []
    for _ in range(size):
        a, b = rng.randint(0, 999), rng.randint(0, 999)
        op = rng.choice("+-")
        lines.append(f"<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n"
                     f"What is {a}{op}{b}?<|im_end|>\n<|im_start|>assistant\nThe answer is {a + b}.<|im_end|>\n")
    return lines


def build_tokenizer(vocab_size: int = 384, seed: int = 0):
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_SPLIT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(corpus(seed), trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>")
    fast.chat_template = CHATML_TEMPLATE
    return fast


def build_model(tokenizer, hidden: int, layers: int, heads: int, intermediate: int, seed: int, max_positions: int = 256):
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    vocab = -(-len(tokenizer) // 64) * 64  # round up: friendlier matmul shapes
    config = Qwen2Config(
        vocab_size=vocab, hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
        num_key_value_heads=heads, intermediate_size=intermediate, max_position_embeddings=max_positions,
        tie_word_embeddings=True, bos_token_id=None, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(config)
    model.generation_config = GenerationConfig(eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    return model


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description="Build a tiny random-init Qwen2 chat model and tokenizer.")
    p.add_argument("--out", required=True, help="output folder (HuggingFace format)")
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--intermediate", type=int, default=768)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    tok = build_tokenizer(seed=a.seed)
    model = build_model(tok, a.hidden, a.layers, a.heads, a.intermediate, a.seed)
    model.save_pretrained(a.out)
    tok.save_pretrained(a.out)
    n = sum(p.numel() for p in model.parameters())
    print(f"wrote {a.out}: {n / 1e6:.2f}M parameters, vocab {model.config.vocab_size} ({len(tok)} used)")


if __name__ == "__main__":
    main()
