"""The "did you mean" of an unknown config key: the valid keys the user plausibly meant, or none.

A suggestion is worse than none when it names a key that means something else: `kl_coef_max` is a
bound of the KL coefficient, not the coefficient, however alike the two spellings look. So a key is
only proposed when, besides looking alike, it keeps every word of the typed leaf (typos allowed) and
adds no bound qualifier (_max, _min, _low, _high ...) that the typed leaf lacks; and it is taken from
the typed key's own section, never from an unrelated one. Nor does it cross roles: a key typed under (or
under a misspelling of) a role's name is answered only with that role's keys or shared ones (data,
algorithm, trainer ...): `actor.model.path` is the policy's model, never the reward model's, and
`ref.optim.lr` gets nothing, since the frozen reference has no optimizer and the actor's lr is another
model's. A key that names no role (`model.path`) is answered with every role's key that fits, so that
none is picked for the user.
"""

from __future__ import annotations

import difflib
import functools

# Words that make a key a bound or one end of another quantity: kl_coef_max is not kl_coef, and
# clip_ratio_max is not clip_ratio_c, however alike the spellings are.
QUALIFIERS = frozenset({"max", "min", "low", "high", "lower", "upper"})
WORD_LIKENESS = 0.75  # "sise" ~ "size", "hihg" ~ "high": one typo in a short word
MAX_TIED = 5  # a bare leaf several sections hold (lr, seed, path): name each, up to this many (one per role)
# The roles a section configures (none: shared settings). actor_rollout_ref.model is the policy's model, which
# the reference starts from; the rollout engine generates with the policy's weights; the top-level `rollout`
# section is the rollout pool of asynchronous training.
SECTION_ROLES: dict[str, frozenset[str]] = {
    "actor_rollout_ref.actor": frozenset({"policy"}), "actor_rollout_ref.rollout": frozenset({"policy"}),
    "rollout": frozenset({"policy"}), "actor_rollout_ref.model": frozenset({"policy", "reference"}),
    "actor_rollout_ref.ref": frozenset({"reference"}), "critic": frozenset({"critic"}),
    "reward_model": frozenset({"reward"}), "custom_reward_function": frozenset({"reward"}),
    "distillation": frozenset({"teacher"}),
}
# the words that name a role in a typed key's groups (`rm.model.path`, `reference.lr`)
ROLE_WORDS = {"actor": "policy", "rollout": "policy", "policy": "policy", "ref": "reference", "reference": "reference",
              "critic": "critic", "value": "critic", "reward_model": "reward", "reward": "reward", "rm": "reward",
              "custom_reward_function": "reward", "distillation": "teacher", "teacher": "teacher"}
ROLE_LIKENESS = 0.8  # "critc" is the critic, "acter" the actor
NO_MATCH = "no similar key exists (--help lists every key)"


def did_you_mean(dotted: str, keys: list[str]) -> str:
    """The end of an unknown-key message: `did you mean 'a' or 'b'? (...)`, or that nothing is similar."""
    close = suggestions(dotted, keys)
    if not close:
        return NO_MATCH
    return f"did you mean {' or '.join(repr(k) for k in close)}? (--help lists every key)"


def suggestions(dotted: str, keys: list[str]) -> list[str]:
    """The valid keys the typed one plausibly stands for, closest first; [] when none does.

    The closest key of the typed key's own section (a misspelt section name is read as the section it
    is closest to), and the same leaf in a sibling role of actor_rollout_ref (the typed
    actor.log_prob_micro_batch_size_per_gpu is rollout's); a key under a section that does not exist
    is matched by its leaf, in the group whose name is closest (actor.use_kl_loss ->
    actor_rollout_ref.actor.use_kl_loss), every section holding that leaf when nothing tells them
    apart (lr -> the actor's and the critic's). Only keys of the role the typed key names, if any (typed_role)."""
    leaf, role = _leaf(dotted), typed_role(dotted)
    plausible = [k for k in keys if same_quantity(leaf, _leaf(k)) and (role is None or _serves(k, role))]
    sections = sorted({_section(k) for k in keys})
    known = difflib.get_close_matches(_section(dotted), sections, n=1, cutoff=0.8)
    if known:
        close = _in_section(dotted, known[0], plausible)
        if close or role is None:
            return close
        # a role's name as a section that lacks the leaf (`rollout.n`: the top-level rollout section is the async
        # pool's): the role's keys, matched by the leaf
    return _by_leaf(dotted, plausible)


def same_quantity(typed_leaf: str, key_leaf: str) -> bool:
    """Whether a key's leaf can name what the typed leaf names: each typed word is in it (up to a
    typo), and it adds no bound qualifier the typed leaf lacks (kl_coef is not kl_coef_max)."""
    typed, key = typed_leaf.split("_"), key_leaf.split("_")
    added = [w for w in key if w in QUALIFIERS]
    return _all_found(typed, key) and _all_found(added, typed)


def typed_role(dotted: str) -> str | None:
    """The role the typed key's groups name (the outermost that does), or None: `actor_rollout_ref.ref.x` is the
    reference's, `critc.lr` the critic's, `model.path` and `lr` nobody's."""
    for group in dotted.split(".")[:-1]:
        close = difflib.get_close_matches(group, list(ROLE_WORDS), n=1, cutoff=ROLE_LIKENESS)
        if close:
            return ROLE_WORDS[close[0]]
    return None


def _serves(key: str, role: str) -> bool:
    """Whether a valid key configures `role`, or no role (a shared setting)."""
    roles = SECTION_ROLES.get(_section(key), frozenset())
    return not roles or role in roles


def _all_found(words: list[str], among: list[str]) -> bool:
    return all(any(_same_word(w, o) for o in among) for w in words)


def _same_word(a: str, b: str) -> bool:
    """One word up to a typo, or one a shortening of the other (trainbatch / train, hi / high, nn / n)."""
    shorter, longer = sorted((a, b), key=len)
    return _likeness(a, b) >= WORD_LIKENESS or longer.startswith(shorter)


def _in_section(dotted: str, section: str, keys: list[str]) -> list[str]:
    """The closest key of `section` to what follows the typed section, then the typed leaf in a sibling
    role of the same top-level group."""
    rest = {k[len(section) + 1:]: k for k in keys if _section(k) == section}
    typed_rest = dotted[len(_section(dotted)) + 1:]
    close = [rest[m] for m in difflib.get_close_matches(typed_rest, list(rest), n=1, cutoff=0.6)]
    top = section.split(".")[0]
    return close + [k for k in keys if k.split(".")[0] == top and _leaf(k) == _leaf(dotted) and k not in close][:1]


def _by_leaf(dotted: str, keys: list[str]) -> list[str]:
    """The keys whose leaf is closest to the typed leaf (at least WORD_LIKENESS alike), the group most
    like the typed one breaking ties; the keys still tied are all named, in the schema's order, since
    nothing says which one was meant."""
    leaf = _leaf(dotted)
    scored = [((_likeness(leaf, _leaf(k)), _group_likeness(dotted, k)), k) for k in keys]
    best = max((score for score, _ in scored), default=(0.0, 0.0))
    if best[0] < WORD_LIKENESS:
        return []
    return [k for score, k in scored if score == best][:MAX_TIED]


def _section(dotted: str) -> str:
    """The part of the config a key belongs to: a top-level group (data, critic, trainer ...), or
    one of actor_rollout_ref's roles (actor_rollout_ref.actor, .rollout, .ref, .model)."""
    parts = dotted.split(".")
    return ".".join(parts[:2]) if parts[0] == "actor_rollout_ref" and len(parts) > 2 else parts[0]


def _leaf(dotted: str) -> str:
    return dotted.rsplit(".", 1)[-1]


@functools.lru_cache(maxsize=65536)
def _likeness(a: str, b: str) -> float:
    # cached: one unknown key compares its words with every key's (~70k pairs over the schema's ~300 keys), and
    # the same word pairs come back for every key of a command and every word typed (the 13 x 300-key test: 10 s)
    return difflib.SequenceMatcher(None, a, b).ratio()


def _group_likeness(dotted: str, key: str) -> float:
    """How alike the groups of two keys look: the typed key's innermost group name against each of the
    candidate's group names (`actor` is like `actor_rollout_ref.actor`, not `critic`)."""
    typed = dotted.rsplit(".", 1)[0].rsplit(".", 1)[-1] if "." in dotted else ""
    return max(_likeness(typed, g) for g in key.split(".")[:-1] or [""])
