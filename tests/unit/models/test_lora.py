"""LoRA on the policy (models/lora.py): merged weights, the adapter-off reference view, and the
lean decoder reading adapted projections."""

from __future__ import annotations

import pytest
import torch

from hybridrl.models.loading import load_causal_lm
from hybridrl.models.lora import (
    LoraSettings,
    apply_lora,
    base_policy,
    effective_weight,
    is_lora,
    plain_state_dict,
)
from hybridrl.rollout import decode
from hybridrl.rollout.base import SamplingParams
from hybridrl.rollout.hf import HFRolloutEngine

pytest.importorskip("peft")


def adapted(path: str, rank: int = 4, targets="all-linear"):
    """A LoRA model whose B matrices are random (peft starts them at 0, where the adapter is a no-op)."""
    module = apply_lora(load_causal_lm(path), LoraSettings(rank, 8.0, targets))
    with torch.no_grad():
        for name, p in module.named_parameters():
            if ".lora_B." in name:
                p.normal_(0, 0.5)
    return module.eval()


IDS = torch.tensor([[1, 5, 9, 40, 41, 7, 300, 12]])


def test_only_adapter_parameters_are_trainable(random_model_dir):
    module = adapted(random_model_dir)
    trainable = [n for n, p in module.named_parameters() if p.requires_grad]
    assert is_lora(module) and not is_lora(load_causal_lm(random_model_dir))
    assert trainable and all(".lora_A." in n or ".lora_B." in n for n in trainable)
    # all-linear: the 7 projections of each of the 2 layers, never the LM head
    assert len(trainable) == 2 * 7 * 2 and not any("lm_head" in n for n in trainable)


def test_plain_state_dict_is_peft_merge_with_base_names_and_leaves_the_module_alone(random_model_dir):
    module = adapted(random_model_dir)
    before = {k: v.clone() for k, v in module.state_dict().items()}
    merged = plain_state_dict(module, module.state_dict())
    assert all(torch.equal(v, before[k]) for k, v in module.state_dict().items())
    reference = module.merge_and_unload().state_dict()  # peft's own merge (changes the module: last)
    assert set(merged) == set(reference)
    for k in reference:
        torch.testing.assert_close(merged[k], reference[k], rtol=0, atol=1e-6)
    plain = load_causal_lm(random_model_dir)
    plain.load_state_dict(merged)
    assert not torch.equal(plain.state_dict()["model.layers.0.self_attn.q_proj.weight"],
                           before["base_model.model.model.layers.0.self_attn.q_proj.base_layer.weight"])


def test_plain_state_dict_of_a_plain_model_is_its_state(random_model_dir):
    module = load_causal_lm(random_model_dir)
    state = module.state_dict()
    assert plain_state_dict(module, state) is state


def test_base_policy_view_computes_the_base_model_and_restores_the_adapter(random_model_dir):
    base = load_causal_lm(random_model_dir).eval()
    module = adapted(random_model_dir).train()
    with torch.no_grad():
        want = base(input_ids=IDS).logits
        adapted_logits = module(input_ids=IDS).logits
        with base_policy(module):
            assert not module.training
            assert torch.equal(module(input_ids=IDS).logits, want)
        assert module.training
        assert torch.equal(module(input_ids=IDS).logits, adapted_logits)
    assert not torch.allclose(adapted_logits, want)


def test_effective_weight_adds_the_adapter(random_model_dir):
    module = adapted(random_model_dir)
    q = module.get_base_model().model.layers[0].self_attn.q_proj
    x = torch.randn(3, q.in_features)
    with torch.no_grad():
        torch.testing.assert_close(x @ effective_weight(q).T + q.base_layer.bias, q(x), rtol=1e-5, atol=1e-5)
        with module.disable_adapter():
            assert effective_weight(q) is q.base_layer.weight
    plain = torch.nn.Linear(4, 2)
    assert effective_weight(plain) is plain.weight


@pytest.mark.parametrize("targets", ["all-linear", ["q_proj", "v_proj"]])
def test_lean_decoding_of_a_lora_model_follows_the_adapter(random_model_dir, targets):
    module = adapted(random_model_dir, targets=targets)
    assert decode.supports(module)
    prompts = torch.tensor([[0, 0, 5, 9, 40], [1, 5, 9, 40, 41]])
    mask = (prompts != 0).long()
    greedy = SamplingParams(max_new_tokens=6, do_sample=False)
    runs = [HFRolloutEngine(module, [2], 0, lean_decode=lean).generate(prompts, mask, greedy, torch.arange(2))
            for lean in (True, False)]
    assert torch.equal(runs[0].response_ids, runs[1].response_ids)
    torch.testing.assert_close(runs[0].log_probs, runs[1].log_probs, rtol=0, atol=1e-4)
    with module.disable_adapter():  # and the adapter matters: the base model says something else
        base = HFRolloutEngine(module, [2], 0).generate(prompts, mask, greedy, torch.arange(2))
    assert not torch.allclose(base.log_probs, runs[0].log_probs)


def test_lean_decoder_refuses_adapted_embeddings(random_model_dir):
    module = adapted(random_model_dir, targets=["q_proj", "embed_tokens"])
    assert not decode.supports(module)


class RecordingEngine:
    """An engine with its own weights (as vllm's): records what the policy syncs into it."""

    shares_weights = False

    def load_weights(self, named_tensors):
        self.weights = dict(named_tensors)


def test_an_engine_with_its_own_weights_gets_the_merged_model_under_base_names(random_model_dir):
    from hybridrl.workers.policy import Policy

    module, engine = adapted(random_model_dir), RecordingEngine()
    Policy(module, None, None, engine, None).sync_engine()
    plain = load_causal_lm(random_model_dir).eval()
    assert set(engine.weights) == set(plain.state_dict())  # what vLLM's reload_weights expects
    plain.load_state_dict(engine.weights)
    with torch.no_grad():
        torch.testing.assert_close(plain(input_ids=IDS).logits, module(input_ids=IDS).logits, rtol=0, atol=1e-5)
