"""`hybridrl rm`'s memory estimate (plan/rm_memory.py): the reward model's resident states by hand, the chosen and
rejected rows of a micro-batch counted together, and a refusal that proposes the largest micro-batch that fits."""

from __future__ import annotations

import pytest
from test_memory import fake_model  # noqa: F401  (the 1448-parameter Qwen2-shaped folder)

from hybridrl.config.loader import load_config
from hybridrl.plan.memory import RUNTIME_BYTES, read_model_dims, value_model_dims
from hybridrl.plan.memory_phases import Forward, update_parts
from hybridrl.config.rm import RMConfig
from hybridrl.plan.rm_memory import check_rm_memory, estimate_rm_memory
from hybridrl.errors import ConfigError


def rm_config(model: str, micro: int, batch: int = 16, length: int = 8) -> RMConfig:
    return load_config(RMConfig, None, [f"model.partial_pretrain={model}", f"data.train_batch_size={batch}",
                                        f"data.micro_batch_size_per_gpu={micro}", f"data.max_length={length}"])


def test_resident_states_are_16_bytes_per_parameter_of_the_model_with_a_score_head(fake_model):  # noqa: F811
    pool = estimate_rm_memory(rm_config(fake_model, 4))
    # 1448 parameters, tied head (none stored) + the score head Linear(8, 1) counted with a bias: 1457
    assert pool.resident == {"runtime (Python, torch, transformers)": RUNTIME_BYTES, "reward model weights": 4 * 1457,
                             "reward model gradients": 4 * 1457, "reward model AdamW moments": 8 * 1457}


def test_a_micro_batch_of_pairs_is_twice_as_many_rows(fake_model):  # noqa: F811
    d = value_model_dims(read_model_dims(fake_model))
    update = {ph.name: ph for ph in estimate_rm_memory(rm_config(fake_model, 4)).phases}["reward-model update"]
    assert update.parts == update_parts(Forward(), d, 8, 1, 0, 8, lm_head=False)  # 4 pairs: 8 rows of 8 tokens
    assert update.parts != update_parts(Forward(), d, 4, 1, 0, 8, lm_head=False)
    assert (update.knob, update.knob_value, update.knob_divides) == ("data.micro_batch_size_per_gpu", 4, 16)


def test_refusal_proposes_the_largest_divisor_that_fits_and_it_does(fake_model):  # noqa: F811
    def peak(micro):
        return estimate_rm_memory(rm_config(fake_model, micro)).peak_bytes
    budget = (peak(4) + peak(8)) // 2  # 8 pairs per micro-batch do not fit, 4 do
    with pytest.raises(ConfigError, match=r"data.micro_batch_size_per_gpu=16\), more than a budget of .*; set "
                                          r"data.micro_batch_size_per_gpu=4 \(the same gradients"):
        check_rm_memory(rm_config(fake_model, 16), budget)
    assert check_rm_memory(rm_config(fake_model, 4), budget).peak_bytes <= budget


def test_when_no_micro_batch_fits_it_says_what_else_to_change(fake_model):  # noqa: F811
    resident = sum(estimate_rm_memory(rm_config(fake_model, 1)).resident.values())
    with pytest.raises(ConfigError, match="no micro-batch size fits: lower data.max_length"):
        check_rm_memory(rm_config(fake_model, 2), resident + 1)
