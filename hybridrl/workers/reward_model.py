"""The reward-model role: a trained sequence-classification model scores each (prompt, response)
at the response's last token.

Token-in when the reward model shares the policy's vocabulary: the policy's own prompt and
response ids are scored, nothing is decoded. Otherwise the chat messages plus the decoded
response are rendered with the reward model's chat template (verl's `input_tokenizer` switch).
"""

from __future__ import annotations

import torch
from torch import Tensor

from hybridrl.batch import Rollout, Sequences, split
from hybridrl.models.forward import device_of, position_ids_of


def last_token_scores(model, input_ids: Tensor, attention_mask: Tensor) -> Tensor:
    """[N] the score head at each row's last real token, for any padding side.

    Read from the hidden states rather than HF's pooled logits: HF finds the last token by
    comparing ids with pad_token_id, which picks the wrong token when EOS is also the pad."""
    hidden = model.base_model(input_ids=input_ids, attention_mask=attention_mask,
                              position_ids=position_ids_of(attention_mask), use_cache=False).last_hidden_state
    positions = torch.arange(attention_mask.shape[1]).expand_as(attention_mask)
    last = (positions * attention_mask).argmax(-1)  # [N] index of the last 1 in each row
    return model.score(hidden[torch.arange(len(last)), last]).squeeze(-1).float()


class RewardModel:
    def __init__(self, module, tokenizer, policy_tokenizer, micro_batch_size: int):
        self.module, self.tokenizer, self.micro_batch_size = module, tokenizer, micro_batch_size
        self.token_in = tokenizer.get_vocab() == policy_tokenizer.get_vocab()

    def _render(self, rollout: Rollout, texts: list[str]) -> Sequences:
        """The reward model's own chat rendering of (messages, response), right-padded."""
        if rollout.prompts.messages is None:
            raise ValueError("the rollout's prompts carry no chat messages to re-render")
        chats = [list(m) + [{"role": "assistant", "content": t}] for m, t in zip(rollout.prompts.messages, texts)]
        if self.tokenizer.chat_template:
            rendered = [self.tokenizer.apply_chat_template(c, tokenize=False) for c in chats]
        else:  # a reward model without a chat template reads the plain turns
            rendered = ["\n".join(m["content"] for m in c) for c in chats]
        enc = self.tokenizer(rendered, add_special_tokens=False, padding=True, padding_side="right", return_tensors="pt")
        return Sequences(enc["input_ids"], enc["attention_mask"], enc["attention_mask"])

    @torch.no_grad()
    def scores(self, rollout: Rollout, texts: list[str]) -> Tensor:
        """[N] one scalar per response; `texts` are the decoded responses (used without a shared vocabulary)."""
        seqs = rollout.sequences() if self.token_in else self._render(rollout, texts)
        device = device_of(self.module)
        return torch.cat([last_token_scores(self.module, part.input_ids.to(device), part.attention_mask.to(device)).cpu()
                          for part in split(seqs, self.micro_batch_size)])
