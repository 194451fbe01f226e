"""LoRA on the value model (models/lora.py, task_type TOKEN_CLS): adapters on the backbone, the new scalar
head trained whole, and its adapter folder (adapters + head) round-tripped through the critic's resume path."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file, save_file

from hybridrl.errors import HybridRLError
from hybridrl.models.loading import load_value_model
from hybridrl.models.lora import ADAPTER_WEIGHTS, LoraSettings, apply_lora, is_lora, load_adapter_weights
from hybridrl.workers.critic import Critic

pytest.importorskip("peft")

IDS = torch.tensor([[1, 5, 9, 40, 41, 7, 300, 12]])
SETTINGS = LoraSettings(4, 8.0, "all-linear", task_type="TOKEN_CLS", key="critic.model")


def value_lora(path: str):
    torch.manual_seed(0)  # the head's init: the same for every call
    return apply_lora(load_value_model(path, "critic.model.path"), SETTINGS)


def values(module) -> torch.Tensor:
    with torch.no_grad():
        return module.eval()(input_ids=IDS).logits[..., 0]  # [1, 8]


def perturb(module) -> None:
    """Random B matrices and head (peft starts B at 0, where the adapter is a no-op)."""
    with torch.no_grad():
        for name, p in module.named_parameters():
            if p.requires_grad:
                p.normal_(0, 0.5)


def test_adapters_on_the_backbone_and_the_head_trained_whole(random_model_dir):
    module = value_lora(random_model_dir)
    trainable = [n for n, p in module.named_parameters() if p.requires_grad]
    head = [n for n in trainable if ".lora_" not in n]
    assert is_lora(module)
    # all-linear: the 7 projections of each of the 2 layers get A and B; the head is not adapted but trained
    # whole as peft's modules_to_save copy (weight and bias of Linear(32, 1))
    assert len(trainable) - len(head) == 2 * 7 * 2 and not any("score" in n and ".lora_" in n for n in trainable)
    assert head == ["base_model.model.score.modules_to_save.default.weight",
                    "base_model.model.score.modules_to_save.default.bias"]
    # at init B = 0 and the trained head is a copy of the original: the same values as the plain value model
    torch.manual_seed(0)
    assert torch.equal(values(module), values(load_value_model(random_model_dir, "critic.model.path")))


def test_adapter_folder_holds_adapters_and_head_and_resumes_into_the_critic(random_model_dir, tmp_path):
    trained = value_lora(random_model_dir)
    perturb(trained)
    trained.save_pretrained(tmp_path, state_dict=trained.state_dict())  # as UpdatingWorker.save_pretrained does
    saved = load_file(tmp_path / ADAPTER_WEIGHTS)
    assert {"base_model.model.score.weight", "base_model.model.score.bias"} <= set(saved)
    assert all(".lora_" in k or ".score." in k for k in saved)  # no base weights
    assert not (tmp_path / "model.safetensors").exists()
    fresh = value_lora(random_model_dir)
    assert not torch.equal(values(fresh), values(trained))
    critic = Critic(fresh, optimizer=None, scheduler=None, settings=None)
    critic.load_pretrained(str(tmp_path))  # UpdatingWorker dispatches on is_lora
    assert torch.equal(values(fresh), values(trained))


@pytest.mark.parametrize("dropped, missing", [
    (".score.", r"base_model\.model\.score\.(weight|bias)"),  # the head (peft raises KeyError: turned into this)
    ("layers.1.mlp.down_proj.lora_A", r"base_model\.model\.model\.layers\.1\.mlp\.down_proj\.lora_A\.default\.weight"),
])
def test_an_adapter_folder_missing_a_trained_tensor_is_refused(random_model_dir, tmp_path, dropped, missing):
    trained = value_lora(random_model_dir)
    trained.save_pretrained(tmp_path, state_dict=trained.state_dict())
    state = load_file(tmp_path / ADAPTER_WEIGHTS)
    save_file({k: v for k, v in state.items() if dropped not in k}, str(tmp_path / ADAPTER_WEIGHTS))
    with pytest.raises(HybridRLError, match=rf"does not match the one being trained \(unexpected \[\], missing "
                                            rf"\['{missing}'\]\); resume with the config that wrote it"):
        load_adapter_weights(value_lora(random_model_dir), str(tmp_path), "critic.model")


def test_a_full_model_folder_names_the_critic_key(random_model_dir, tmp_path):
    load_value_model(random_model_dir, "critic.model.path").save_pretrained(tmp_path)
    critic = Critic(value_lora(random_model_dir), optimizer=None, scheduler=None, settings=None)
    with pytest.raises(HybridRLError, match="not written by a LoRA run; resume with the config that wrote it "
                                            r"\(critic.model.lora_rank\)"):
        critic.load_pretrained(str(tmp_path))


def test_the_new_adapters_and_head_depend_on_trainer_seed_only(random_model_dir):
    from hybridrl.config.loader import load_config
    from hybridrl.config.schema import RLConfig
    from hybridrl.plan.resolve import fill_precision
    from hybridrl.workers.build import build_critic

    def trained_init(global_seed: int, *more: str) -> dict[str, torch.Tensor]:
        cfg = load_config(RLConfig, None, ["algorithm.adv_estimator=gae", "critic.model.lora_rank=4",
                                           f"actor_rollout_ref.model.path={random_model_dir}", *more])
        fill_precision(cfg)  # the `auto` dtypes, as plan/resolve.py fills them in before any role is built
        torch.manual_seed(global_seed)  # earlier draws of the process must not matter
        module = build_critic(cfg, total=1).module
        return {n: p.detach().clone() for n, p in module.named_parameters() if p.requires_grad}

    first, other_draws, other_seed = trained_init(0), trained_init(123), trained_init(0, "trainer.seed=2")
    a = [n for n in first if ".lora_A." in n]
    assert a and all(torch.equal(first[n], other_draws[n]) for n in first)  # A matrices and head: seeded
    assert not any(torch.equal(first[n], other_seed[n]) for n in a)
