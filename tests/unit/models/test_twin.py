"""models/twin.py: the shrunk twin keeps what a check's verdict depends on (architecture class, vocabulary,
tokenizer and chat template files byte for byte, tied embeddings, grouped key/value heads) and changes only
the size; a folder without config.json or tokenizer files is one error naming what is missing."""

from __future__ import annotations

import filecmp
import json
import os

import pytest
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, Qwen2Config

from hybridrl.models.loading import resolve_model_path
from hybridrl.models.twin import TwinError, build_twin, shrunk_config


def test_the_twin_of_the_bundled_model_keeps_its_tokenizer_and_class_and_is_small(tmp_path):
    real = resolve_model_path("tiny-arith")
    out = build_twin(real, str(tmp_path / "twin"))
    real_cfg, twin_cfg = AutoConfig.from_pretrained(real), AutoConfig.from_pretrained(out)
    assert twin_cfg.architectures == real_cfg.architectures and twin_cfg.model_type == real_cfg.model_type
    assert twin_cfg.vocab_size == real_cfg.vocab_size and twin_cfg.tie_word_embeddings == real_cfg.tie_word_embeddings
    assert (twin_cfg.num_hidden_layers, twin_cfg.hidden_size) == (2, 64)
    for name in os.listdir(real):  # every tokenizer / template file identical; no weights copied
        if name.startswith("tokenizer") or name.endswith(".jinja"):
            assert filecmp.cmp(os.path.join(real, name), os.path.join(out, name), shallow=False), name
    a, b = AutoTokenizer.from_pretrained(real), AutoTokenizer.from_pretrained(out)
    chat = [{"role": "user", "content": "What is 12+30?"}]
    assert a.apply_chat_template(chat, tokenize=False) == b.apply_chat_template(chat, tokenize=False)
    assert a("12+30=42")["input_ids"] == b("12+30=42")["input_ids"]
    model = AutoModelForCausalLM.from_pretrained(out)
    assert model.get_output_embeddings().weight.shape[0] == real_cfg.vocab_size
    assert json.load(open(os.path.join(out, "twin.json")))["of"] == os.path.abspath(real)


def test_grouped_query_attention_keeps_its_grouping_and_options():
    real = Qwen2Config(vocab_size=1000, hidden_size=896, num_hidden_layers=24, num_attention_heads=14,
                       num_key_value_heads=2, intermediate_size=4864, tie_word_embeddings=True, rope_theta=1e6)
    small = shrunk_config(real, layers=2, width=64, heads=2)
    assert (small.num_hidden_layers, small.hidden_size, small.num_attention_heads) == (2, 64, 2)
    assert small.num_key_value_heads == 1  # 14 query heads over 2 kv heads: 7 per group, so 2 share 1 here
    assert getattr(small, "head_dim", None) in (None, 32) and small.intermediate_size == 128  # Qwen2: hidden / heads
    assert small.vocab_size == 1000 and small.tie_word_embeddings and real.num_hidden_layers == 24  # real unchanged


@pytest.mark.parametrize("keep,missing", [((), "config.json"), (("config.json",), "tokenizer files")])
def test_a_folder_without_what_a_twin_needs_is_one_error_naming_it(tmp_path, keep, missing):
    real = resolve_model_path("tiny-arith")
    folder = tmp_path / "model"
    folder.mkdir()
    for name in keep:
        (folder / name).write_bytes(open(os.path.join(real, name), "rb").read())
    with pytest.raises(TwinError, match=f"missing: .*{missing}") as e:
        build_twin(str(folder), str(tmp_path / "twin"))
    assert "\n" not in str(e.value) and not (tmp_path / "twin").exists()
