"""Padding-free forwards (models/packing.py) and trimmed padded rows: every layout of a micro-batch
gives the padded path's log-probs, entropies, values and gradients."""

import pytest
import torch

from hybridrl.batch import Sequences
from hybridrl.models.forward import Layout, response_log_probs, response_values, trimmed
from hybridrl.models.loading import load_causal_lm, load_value_model
from hybridrl.models.packing import pack

LAYOUTS = [Layout(False, False), Layout(True, False), Layout(False, True), Layout(True, True),
           Layout(False, True, pack_width=32), Layout(True, True, pack_width=32)]


@pytest.fixture(scope="module")
def model(random_model_dir):
    return load_causal_lm(random_model_dir)


def batch(prompts: list[list[int]], lengths: list[list[int]], T: int, pad_prompt_to: int = 0, seed: int = 0,
          tool_rows: tuple = ()) -> Sequences:
    """Prompts left-padded to max(len, pad_prompt_to), responses of the given lengths right-padded to T;
    rows in `tool_rows` get response_mask 0 on their second token (a tool token: attended, not trained)."""
    g = torch.Generator().manual_seed(seed)
    P = max(max(map(len, prompts)), pad_prompt_to)
    ids, attn, resp = [], [], []
    for p, ls in zip(prompts, lengths):
        for length in ls:
            r = torch.randint(3, 300, (T,), generator=g)
            r[length:] = 0
            live = (torch.arange(T) < length).long()
            ids.append(torch.tensor([0] * (P - len(p)) + p + r.tolist()))
            attn.append(torch.cat([torch.tensor([0] * (P - len(p)) + [1] * len(p)), live]))
            resp.append(live.clone())
    for row in tool_rows:
        resp[row][1] = 0
    return Sequences(torch.stack(ids), torch.stack(attn), torch.stack(resp))


def varied() -> Sequences:
    # 3 prompts of 2-5 tokens, 1-3 responses each of 1-7 tokens (one the full width), prompt padding to 9
    return batch([[5, 6, 7], [8, 9, 10, 11, 12], [13, 14]], [[4, 1, 7], [2, 6], [3]], T=7, pad_prompt_to=9,
                 tool_rows=(0, 3))


def test_pack_places_every_token_once_with_restarting_positions():
    seqs = varied()
    for share in (False, True):
        p = pack(seqs, share_prompts=share)
        real = int(seqs.attention_mask.sum())
        # shared: rows are 11 wide (5 + 6), so prompt [5,6,7] goes with responses 4+1 and again with 7,
        # prompt [8..12] with 2 and again with 6, prompt [13,14] once with 3
        prompt_tokens = 3 + 3 + 5 + 5 + 2 if share else int(seqs.attention_mask[:, :9].sum())
        responses = int(seqs.attention_mask[:, 9:].sum())
        assert int((p.position_ids > 0).sum() + (p.position_ids == 0).sum()) == p.input_ids.numel()
        # the packed rows hold each response once and each prompt once (shared) or once per response
        assert int((p.input_ids != 0).sum()) == prompt_tokens + responses
        assert real >= prompt_tokens + responses
        # rows are never longer than the longest sequence (5 + 6 = 11 tokens): no attention beyond the padded width
        assert p.input_ids.shape[1] <= 11
        # a response token reads the output one position earlier: the first reads its prompt's last token
        first_prompt_last = p.input_ids[p.out_rows[0, 0], p.out_cols[0, 0]]
        assert int(first_prompt_last) == 7


@pytest.mark.parametrize("layout", LAYOUTS[1:], ids=["shared", "packed", "packed+shared", "wide", "wide+shared"])
def test_layouts_equal_the_padded_forward(model, layout):
    seqs = varied()
    results = []
    for lay in (LAYOUTS[0], layout):
        model.zero_grad()
        lp, ent = response_log_probs(model, seqs, temperature=0.7, with_entropy=True, layout=lay)
        (lp.sum() + 0.1 * ent.sum()).backward()
        results.append((lp.detach(), ent.detach(), [p.grad.clone() for p in model.parameters()]))
    (lp0, ent0, g0), (lp1, ent1, g1) = results
    torch.testing.assert_close(lp1, lp0, atol=1e-5, rtol=0)
    torch.testing.assert_close(ent1, ent0, atol=1e-5, rtol=0)
    assert (lp1[seqs.response_mask == 0] == 0).all() and (ent1[seqs.response_mask == 0] == 0).all()
    for a, b in zip(g0, g1):
        torch.testing.assert_close(b, a, atol=1e-5, rtol=1e-4)
    assert any(a.abs().sum() > 0 for a in g1)  # the comparison is not between zeros


def test_padded_forward_equals_each_sequence_alone(model):
    """The reference itself: a row's log-probs do not depend on the other rows or on padding."""
    seqs = varied()
    lp = response_log_probs(model, seqs)[0]
    for n in range(len(seqs.input_ids)):
        alone = trimmed(Sequences(seqs.input_ids[n:n + 1], seqs.attention_mask[n:n + 1], seqs.response_mask[n:n + 1]))
        one = response_log_probs(model, alone)[0][0]
        torch.testing.assert_close(lp[n, :len(one)], one, atol=1e-5, rtol=0)


@pytest.mark.parametrize("packed", [False, True])
def test_values_equal_the_padded_forward(random_model_dir, packed):
    critic = load_value_model(random_model_dir, "critic.model.path")
    seqs = varied()
    v0 = response_values(critic, seqs)
    v1 = response_values(critic, seqs, Layout(False, packed))
    torch.testing.assert_close(v1, v0, atol=1e-5, rtol=0)
    assert (v1[seqs.response_mask == 0] == 0).all() and v1.abs().sum() > 0


def test_trimmed_drops_only_all_padding_columns():
    seqs = varied()
    t = trimmed(seqs)
    assert t.input_ids.shape == (len(seqs.input_ids), 5 + 7)  # longest prompt 5 of 9 columns, responses reach 7
    short = batch([[5, 6]], [[2, 1]], T=6, pad_prompt_to=4)
    assert trimmed(short).response_mask.shape[1] == 2 and trimmed(short, min_response=4).response_mask.shape[1] == 4


def test_wide_rows_hold_several_sequences_and_whole_groups():
    seqs = varied()  # 6 sequences of 5..11 tokens, 3 prompts
    narrow, wide = pack(seqs), pack(seqs, min_width=32)
    assert narrow.input_ids.shape[1] == 11 and wide.input_ids.shape[1] <= 32
    assert len(wide.input_ids) < len(narrow.input_ids)
    shared = pack(seqs, share_prompts=True, min_width=32)
    # every group fits in 32 tokens: each prompt appears once (3 + 5 + 2 prompt tokens + 23 response tokens)
    assert int((shared.input_ids != 0).sum()) == 10 + 23


def test_packed_forward_through_a_lora_module(random_model_dir):
    """peft's wrapper passes the 4D mask, positions and logits_to_keep through to the model."""
    from hybridrl.models.lora import LoraSettings, apply_lora

    lora = apply_lora(load_causal_lm(random_model_dir), LoraSettings(4, 8.0, "all-linear", None, None, "CAUSAL_LM",
                                                                     "actor_rollout_ref.model"))
    seqs = varied()
    want = response_log_probs(lora, seqs)[0]
    torch.testing.assert_close(response_log_probs(lora, seqs, layout=Layout(True, True, 32))[0], want, atol=1e-5, rtol=0)
