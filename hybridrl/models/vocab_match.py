"""A teacher scores the student's token ids as they are, so both must read the ids alike: the same vocabulary
and special tokens, and logits over a vocabulary that covers every id the tokenizer can produce."""

from __future__ import annotations

from hybridrl.errors import ConfigError


def _special(tok) -> dict[str, object]:
    """The tokenizer's special tokens and their ids (eos, pad, bos, the chat template's extras)."""
    ids = {name: getattr(tok, f"{name}_token_id", None) for name in ("bos", "eos", "pad", "unk")}
    return {**ids, "special": sorted(tok.all_special_tokens)}


def tokenizer_mismatch(student, teacher) -> str | None:
    """None when the two tokenizers map every string to the same id; else what differs, in a few words."""
    sv, tv = student.get_vocab(), teacher.get_vocab()
    if sv != tv:
        differ = sorted(set(sv.items()) ^ set(tv.items()), key=lambda kv: kv[1])
        return f"vocabularies differ ({len(sv)} vs {len(tv)} tokens; first difference: {differ[0][0]!r})"
    ss, ts = _special(student), _special(teacher)
    if ss != ts:
        key = next(k for k in ss if ss[k] != ts[k])
        return f"special tokens differ ({key}: {ss[key]!r} vs {ts[key]!r})"
    return None


def check_same_tokenizer(student, teacher, student_path: str, teacher_path: str) -> None:
    """One-line error naming both folders when the teacher would read the student's ids differently."""
    why = tokenizer_mismatch(student, teacher)
    if why is not None:
        raise ConfigError(f"distillation.teacher_model.model_path={teacher_path} has another tokenizer than "
                          f"actor_rollout_ref.model.path={student_path}: {why}; the teacher scores the student's "
                          "token ids, so both must share one tokenizer")


def logits_size(path: str, key: str = "actor_rollout_ref.model.path") -> int:
    """How many logits the model in `path` computes per position: its config's vocab_size (the output embedding's
    rows), read without loading the weights (a teacher in its own Ray pool has no student module beside it)."""
    from transformers import AutoConfig

    from hybridrl.models.loading import resolve_model_path

    return int(AutoConfig.from_pretrained(resolve_model_path(path, key)).get_text_config().vocab_size)


def check_logits_cover(s: int, t: int, vocab_len: int, student_path: str, teacher_path: str) -> None:
    """Both models' logits (s: the student's count per position, t: the teacher's) must cover the tokenizer's ids;
    sizes may differ only in padding rows beyond it (Qwen pads to a multiple of 64 or 128, per model size), which no
    sampled token reaches."""
    if s != t and min(s, t) < vocab_len:
        raise ConfigError(f"distillation.teacher_model.model_path={teacher_path} computes {t} logits per token and "
                          f"actor_rollout_ref.model.path={student_path} {s}, for a tokenizer of {vocab_len} tokens: "
                          "the teacher cannot score every token the student samples")
