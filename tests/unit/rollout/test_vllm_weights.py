"""The weights file the vLLM engine loads (rollout/vllm.py): written in the engine's dtype, tied tensors as copies.
No vLLM needed: only the file is checked."""

import torch
from safetensors.torch import load_file

from hybridrl.rollout.vllm import _distinct, write_engine_folder


def test_floating_tensors_are_written_in_the_engine_dtype_and_integers_untouched():
    embed = torch.randn(4, 2)
    state = {"embed": embed, "lm_head": embed, "steps": torch.tensor([3])}  # lm_head tied to the embeddings
    out = _distinct(state, "bfloat16")
    assert out["embed"].dtype == out["lm_head"].dtype == torch.bfloat16 and out["steps"].dtype == torch.long
    assert torch.equal(out["embed"], embed.to(torch.bfloat16))
    assert out["embed"].untyped_storage().data_ptr() != out["lm_head"].untyped_storage().data_ptr()
    kept = _distinct(state, "float32")  # the trainer's own dtype: the same values, the tie made a copy
    assert kept["embed"].dtype == torch.float32 and torch.equal(kept["lm_head"], embed)
    assert kept["embed"].untyped_storage().data_ptr() != kept["lm_head"].untyped_storage().data_ptr()


def test_the_engine_folder_holds_bf16_weights_and_untied_config(tmp_path, random_model_dir):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(random_model_dir)
    write_engine_folder(random_model_dir, model.state_dict(), str(tmp_path), "bfloat16")
    weights = load_file(str(tmp_path / "model.safetensors"))
    assert {t.dtype for t in weights.values()} == {torch.bfloat16} and "lm_head.weight" in weights
    assert '"tie_word_embeddings": false' in (tmp_path / "config.json").read_text()
