"""trainer/learning_signal.py: one warning when most groups carry no learning signal, step after step."""

from types import SimpleNamespace

from hybridrl.algos.advantages import ADV_ESTIMATORS
from hybridrl.trainer.learning_signal import KEY, SignalContext, ZeroSignalWatch, scorer_hints, zero_signal_message

CONTEXT = SignalContext("grpo", 4, 128, 1.0, ("openai/gsm8k: 1.0 if the number after the last '####' ...",))


def step(frac: float, score: float = 0.0, clip: float = 1.0, accuracy: float = 0.0) -> dict[str, float]:
    return {KEY: frac, "critic/score/mean": score, "response_length/clip_ratio": clip, "response_length/mean": 128.0,
            "reward/accuracy": accuracy}


def warnings_over(watch: ZeroSignalWatch, fracs: list[float]) -> list[int]:
    """The (1-based) steps at which the watch warned."""
    return [i + 1 for i, f in enumerate(fracs) if watch.observe(step(f)) is not None]


def test_warns_once_after_patience_steps_in_a_row():
    watch = ZeroSignalWatch(CONTEXT, patience=5)
    assert warnings_over(watch, [1.0] * 12) == [5]  # once, at the 5th flat step, never again


def test_a_step_with_signal_restarts_the_count():
    watch = ZeroSignalWatch(CONTEXT, patience=3)
    # 0.89 is below the 0.9 threshold: the streak 1..2 breaks, a new one runs 4..6
    assert warnings_over(watch, [1.0, 0.95, 0.89, 0.9, 1.0, 0.93, 1.0]) == [6]


def test_never_warns_with_patience_zero_or_without_the_metric():
    assert warnings_over(ZeroSignalWatch(CONTEXT, patience=0), [1.0] * 10) == []
    watch = ZeroSignalWatch(CONTEXT, patience=1)
    assert watch.observe({"critic/score/mean": 0.0}) is None and not watch.warned


def run_stub(estimator: str, total_steps: int, resumed_at: int | None = None, custom: str | None = None,
             distill: object = None):
    """What of an RLRun the watch reads."""
    records = [SimpleNamespace(data_source=s) for s in ("openai/gsm8k", "arithmetic", "openai/gsm8k")]
    return SimpleNamespace(
        total_steps=total_steps, resume=SimpleNamespace(step=resumed_at) if resumed_at is not None else None,
        train_data=SimpleNamespace(records=records), loop=SimpleNamespace(n=8, max_response_length=64, distill=distill),
        sampling=SimpleNamespace(temperature=0.7),
        reward=SimpleNamespace(pool=SimpleNamespace(ref=SimpleNamespace(path=custom, function=None)), reward_model=None)), \
        ADV_ESTIMATORS.entry(estimator)


def test_only_group_estimators_are_watched_and_short_runs_use_every_step():
    assert ZeroSignalWatch.of_run(*run_stub("grpo", 100)).patience == 5
    assert ZeroSignalWatch.of_run(*run_stub("rloo", 3)).patience == 3  # the whole run when shorter
    assert ZeroSignalWatch.of_run(*run_stub("grpo", 10, resumed_at=8)).patience == 2  # the steps left to run
    assert ZeroSignalWatch.of_run(*run_stub("gae", 100)).patience == 0  # the critic's values give a signal
    assert ZeroSignalWatch.of_run(*run_stub("reinforce_plus_plus", 100)).patience == 0  # a batch baseline
    # a distillation loss trains every response, equal rewards or not
    assert ZeroSignalWatch.of_run(*run_stub("grpo", 100, distill=SimpleNamespace(estimator="k3"))).patience == 0


def test_the_context_names_the_run_settings_and_each_scorer():
    watch = ZeroSignalWatch.of_run(*run_stub("grpo", 100))
    c = watch.context
    assert (c.estimator, c.n, c.max_response_length, c.temperature) == ("grpo", 8, 64, 0.7)
    assert [h.split(":")[0] for h in c.scorer_hints] == ["arithmetic", "openai/gsm8k"]  # each source once, sorted
    assert "'####'" in c.scorer_hints[1]
    assert scorer_hints(["openai/gsm8k"], "my_reward.py", False) == (
        "custom_reward_function.path=my_reward.py scores every response: check what it expects",)
    assert scorer_hints(["no/such/source"], None, True) == (
        "reward_model.model.path scores too (reward_model.rm_weight / rule_weight)",)


def test_the_message_names_the_causes_and_the_keys_to_try():
    text = zero_signal_message([step(1.0), step(1.0, clip=0.5)], 0.9, CONTEXT)
    head, *causes = text.splitlines()
    assert head.startswith("WARNING: no learning signal in the last 2 step(s): in each, 90% or more of the prompt "
                           f"groups ({KEY}, mean 1.00) gave all their 4 responses the same reward "
                           "(critic/score/mean 0)")
    assert "grpo's advantages are 0" in head and "actor/pg_loss 0" in head
    assert causes[0] == "  - responses cut before the answer: 75% of them hit data.max_response_length=128 " \
                        "(mean length 128); raise it"
    assert "'####'" in causes[1] and "trainer.rollout_data_dir" in causes[1]
    assert "actor_rollout_ref.rollout.temperature (now 1)" in causes[2] and "rollout.n (now 4)" in causes[2]
    assert causes[3].startswith("  - data too hard for the model: easier data (data.train_files)")


def test_all_right_is_data_too_easy():
    text = zero_signal_message([step(1.0, score=1.0, clip=0.0, accuracy=1.0)], 0.9, CONTEXT)
    assert text.splitlines()[-1] == "  - data too easy for the model (every response right): harder data " \
                                    "(data.train_files)"
