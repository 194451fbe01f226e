import os
import re

import pytest
from transformers import AutoTokenizer

from hybridrl.errors import ConfigError
from hybridrl.models.loading import BUNDLED, check_context_length, load_causal_lm, resolve_model_path
from hybridrl.models.tiny import build_tokenizer


def test_autotokenizer_gives_the_ids_the_tokenizer_was_trained_with(tmp_path, random_model_dir):
    # transformers loads a qwen2 folder as Qwen2Tokenizer and rebuilds its pre-tokenizer; ours must agree
    raw = build_tokenizer()
    loaded = AutoTokenizer.from_pretrained(random_model_dir)
    text = "<|im_start|>user\nWhat is 12+345-6?<|im_end|>\n<|im_start|>assistant\n351<|im_end|> hi  there 2024"
    assert loaded(text, add_special_tokens=False)["input_ids"] == raw.backend_tokenizer.encode(text, add_special_tokens=False).ids
    digits = loaded.convert_ids_to_tokens(loaded("12345", add_special_tokens=False)["input_ids"])
    assert digits == ["1", "2", "3", "4", "5"]  # one token per digit


def test_bundled_model_resolves_to_a_folder_in_the_package():
    path = resolve_model_path("tiny-arith")
    assert path == str(BUNDLED["tiny-arith"])
    assert os.path.isfile(os.path.join(path, "model.safetensors"))
    assert os.path.getsize(os.path.join(path, "model.safetensors")) <= 20 * 2**20


def test_unknown_model_path_is_a_clear_error():
    with pytest.raises(ConfigError, match=r"'no/such-model' is neither a model folder nor a bundled model \(tiny-arith\)"):
        resolve_model_path("no/such-model")


def test_context_length_check(random_model_dir):
    model = load_causal_lm(random_model_dir)
    check_context_length(model, 100, 100)
    with pytest.raises(ConfigError, match="exceeds the model's max_position_embeddings=256"):
        check_context_length(model, 200, 100)


def test_a_folder_without_config_json_is_not_a_model_folder(tmp_path):
    with pytest.raises(ConfigError, match=re.escape(f"critic.model.path='{tmp_path}' is a folder without a config.json, "
                                                    "not a HuggingFace model folder")):
        resolve_model_path(str(tmp_path), "critic.model.path")


def test_a_config_json_transformers_cannot_read_is_one_line(tmp_path):
    """An empty config.json used to be transformers' ValueError traceback (from plan's memory estimate too)."""
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(ConfigError, match=re.escape(f"model {tmp_path}: cannot load it as a HuggingFace model "
                                                    "(Unrecognized model in")):
        load_causal_lm(str(tmp_path))
    from hybridrl.plan.memory import _dims

    with pytest.raises(ConfigError, match=re.escape(f"actor_rollout_ref.model.path='{tmp_path}': cannot load it")):
        _dims(str(tmp_path), "actor_rollout_ref.model.path")


def test_loading_models_prints_no_progress_bars_and_restores_the_setting(capfd, random_model_dir):
    from transformers.utils import logging as hf_logging

    from hybridrl.models.loading import load_value_model

    assert hf_logging.is_progress_bar_enabled()
    load_causal_lm(random_model_dir)
    load_value_model(random_model_dir, "critic.model.path")
    err = capfd.readouterr().err
    assert "Loading weights" not in err and "\r" not in err  # transformers draws one per load unless told not to
    assert hf_logging.is_progress_bar_enabled()  # a library user's own loads still get theirs
