"""hybridrl/api/rewards.py: signature detection, weighting, None, async, and the functions' way through the
scoring pool (in this process and in worker processes)."""

from __future__ import annotations

import asyncio
import multiprocessing
import pickle
import threading

import pytest

from hybridrl.api.rewards import TRL, VERL, VERL_BATCHED, function_ref, kind_of
from hybridrl.errors import ConfigError
from hybridrl.rewards.pool import ScoringPool

SOURCES, TEXTS, TRUTHS = ["s", "s"], ["3", "5"], ["3", "4"]
INFOS = [{"answer": 3}, {"answer": 4}]
PROMPTS = [[{"role": "user", "content": "1+2?"}], [{"role": "user", "content": "2+2?"}]]


def exact(prompts, completions, answer, **kwargs):
    return [float(c == str(a)) for c, a in zip(completions, answer)]


def length(completions, **kwargs):
    return [float(len(c)) for c in completions]


def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    return {"score": float(solution_str == ground_truth), "acc": solution_str == ground_truth}


def batched(data_sources, solution_strs, ground_truths, extra_infos):
    return [0.5] * len(solution_strs)


def score(ref, prompts=PROMPTS, texts=TEXTS, num_workers=0):
    pool = ScoringPool(ref, num_workers, timeout_s=30)
    try:
        return pool.score(SOURCES, texts, TRUTHS, INFOS, prompts=prompts)
    finally:
        pool.close()


@pytest.mark.parametrize("fn, kind", [(exact, TRL), (length, TRL), (lambda **kw: [], TRL), (compute_score, VERL),
                                      (batched, VERL_BATCHED)])
def test_the_signature_is_read_from_the_parameter_names(fn, kind):
    assert kind_of(fn) == kind


def test_a_function_of_neither_signature_is_refused_naming_it():
    def judge(text, truth):
        return 1.0

    with pytest.raises(ConfigError, match=r"reward function judge\(text, truth\) has neither TRL's signature"):
        function_ref(judge)


def test_one_trl_function_gets_text_prompts_completions_and_the_columns():
    seen = {}

    def spy(prompts, completions, **columns):
        seen.update(prompts=prompts, completions=completions, **columns)
        return [1.0, 0.0]

    results = score(function_ref(spy, text_prompts=True))
    assert [r.score for r in results] == [1.0, 0.0] and all(r.error is None for r in results)
    assert seen == {"prompts": ["1+2?", "2+2?"], "completions": ["3", "5"], "data_source": SOURCES,
                    "ground_truth": TRUTHS, "extra_info": INFOS, "answer": [3, 4]}


def test_conversational_data_gives_trl_functions_messages():
    seen = {}

    def spy(prompts, completions, **columns):
        seen.update(prompts=prompts, completions=completions)
        return [0.0, 0.0]

    score(function_ref(spy, text_prompts=False))
    assert seen == {"prompts": PROMPTS, "completions": [[{"role": "assistant", "content": "3"}],
                                                        [{"role": "assistant", "content": "5"}]]}


def test_several_functions_are_summed_with_their_weights_and_logged_by_name():
    # response "3" (answer 3): exact 1, length 1 -> 2*1 + 0.5*1 = 2.5; response "5" (answer 4): 2*0 + 0.5*1 = 0.5
    results = score(function_ref([exact, length], weights=[2.0, 0.5], text_prompts=True))
    assert [r.score for r in results] == [2.5, 0.5]
    assert [r.extras for r in results] == [{"exact": 1.0, "length": 1.0}, {"exact": 0.0, "length": 1.0}]


def test_a_verl_function_among_trl_ones_keeps_its_extras():
    # "3" vs truth "3": compute_score 1 (acc True), length 1 -> 2; "5" vs "4": 0 + 1 = 1
    results = score(function_ref([compute_score, length], text_prompts=True))
    assert [r.score for r in results] == [2.0, 1.0]
    assert results[0].extras == {"acc": True, "compute_score": 1.0, "length": 1.0}


def test_none_adds_nothing_and_a_response_no_function_scored_fails():
    def first_only(completions, **kw):
        return [1.0, None]

    def never(completions, **kw):
        return [None, None]

    # response 0: 1.0 + (None: nothing) = 1.0; response 1: None and None: no score, a failed sample
    both = score(function_ref([first_only, never], text_prompts=True))
    assert both[0].score == 1.0 and both[0].error is None
    assert both[1].error == "every reward function returned None (no score) for it"
    alone = score(function_ref(first_only, text_prompts=True))
    assert alone[1].error == "the reward function returned None (no score) for it"


def test_async_functions_are_awaited_together():
    started = []

    async def slow_a(completions, **kw):
        started.append("a")
        await asyncio.sleep(0.05)
        assert started == ["a", "b"]  # b started while a waited: they run concurrently
        return [1.0, 1.0]

    async def slow_b(completions, **kw):
        started.append("b")
        await asyncio.sleep(0.05)
        return [2.0, 0.0]

    async def verl_async(data_source, solution_str, ground_truth, extra_info=None):
        return float(solution_str == ground_truth)

    assert [r.score for r in score(function_ref([slow_a, slow_b], text_prompts=True))] == [3.0, 1.0]
    assert [r.score for r in score(function_ref(verl_async))] == [1.0, 0.0]


def test_async_functions_run_where_an_event_loop_already_runs():
    async def a(completions, **kw):
        return [1.0, 2.0]

    async def caller():  # as in a notebook cell: the thread's loop is running
        return score(function_ref(a, text_prompts=True))

    assert [r.score for r in asyncio.run(caller())] == [1.0, 2.0]


def test_a_failing_or_misshapen_function_fails_its_samples_with_its_name():
    def broken(completions, **kw):
        raise ValueError("bad")

    def short(completions, **kw):
        return [1.0]

    def per_sample(data_source, solution_str, ground_truth, extra_info=None):
        if solution_str == "5":
            raise KeyError("x")
        return 1.0

    assert all(r.error.startswith("reward function 'broken' raised ValueError: bad (at ")
               for r in score(function_ref(broken, text_prompts=True)))
    assert score(function_ref(short))[0].error == "reward function 'short' returned 1 values for 2 completions"
    ok, failed = score(function_ref([per_sample, length]))
    assert ok.score == 2.0 and failed.error.startswith("reward function 'per_sample' raised KeyError: 'x' (at ")


def test_one_plain_verl_function_is_scored_per_response_as_a_reward_file_is():
    ref = function_ref(compute_score)
    assert not ref.batched and ref.function is compute_score and ref.name == "compute_score"
    assert [r.score for r in score(ref)] == [1.0, 0.0]


def test_weights_must_match_the_functions():
    with pytest.raises(ConfigError, match="reward_weights has 1 values for 2 reward functions"):
        function_ref([exact, length], weights=[1.0])
    with pytest.raises(ConfigError, match="reward_weights is given without reward="):
        function_ref(None, weights=[1.0])


def test_worker_processes_score_a_closure_it_was_given():
    offset = 10.0

    def shifted(completions, **kw):
        return [offset + len(c) for c in completions]

    assert [r.score for r in score(function_ref(shifted, text_prompts=True), num_workers=2)] == [11.0, 11.0]


def test_a_function_ref_travels_by_value():
    offset = 3.0
    ref = function_ref(lambda completions, **kw: [offset] * len(completions), text_prompts=True)
    back = pickle.loads(pickle.dumps(ref))  # what a spawn worker or a Ray actor would receive
    assert back.function(["a"], ["b"], [""], [{}], prompts=[[{"role": "user", "content": "q"}]]) == [3.0]


def test_an_unpicklable_function_is_refused_by_name_when_it_must_travel(monkeypatch):
    lock = threading.Lock()

    def guarded(data_source, solution_str, ground_truth, extra_info=None):
        with lock:
            return 1.0

    ref = function_ref(guarded)
    assert [r.score for r in score(ref, num_workers=2)] == [1.0, 1.0]  # fork: inherited, nothing pickled
    monkeypatch.setattr(multiprocessing, "get_all_start_methods", lambda: ["spawn"])
    with pytest.raises(ConfigError) as e:
        ScoringPool(ref, num_workers=2, timeout_s=30)
    assert str(e.value).startswith(
        "the reward function 'test_an_unpicklable_function_is_refused_by_name_when_it_must_travel.<locals>.guarded' "
        "cannot be pickled (TypeError: cannot pickle '_thread.lock' object), but reward_model.num_workers=2 starts "
        "its scoring processes with spawn, and each must receive it")
    assert "\n" not in str(e.value)


# Issue #48 part 4: a TRL-style function on verl-schema rows gets every column of the row under its own name.
VERL_ROWS = [{"data_source": "s", "reward_model": {"style": "rule", "ground_truth": "3"}, "ability": "math",
              "extra_info": {"answer": 3}, "difficulty": 1},
             {"data_source": "s", "reward_model": {"style": "rule", "ground_truth": "4"}, "ability": "math",
              "extra_info": {"answer": 4}, "difficulty": 2}]


def test_a_trl_function_reads_the_verl_rows_own_columns_by_name():
    def from_reward_model(prompts, completions, reward_model, **kwargs):  # as TRL users write it
        assert kwargs["ability"] == ["math", "math"] and kwargs["difficulty"] == [1, 2]
        return [float(c == rm["ground_truth"]) for c, rm in zip(completions, reward_model)]

    pool = ScoringPool(function_ref(from_reward_model, text_prompts=True), 0, timeout_s=30)
    try:
        results = pool.score(SOURCES, ["3", "5"], TRUTHS, INFOS, prompts=PROMPTS, columns=VERL_ROWS)
    finally:
        pool.close()
    assert [(r.score, r.error) for r in results] == [(1.0, None), (0.0, None)]


def test_a_trl_function_naming_a_column_the_rows_lack_is_told_the_names_they_have():
    def wants_solution(prompts, completions, solution):
        return [1.0] * len(completions)

    def reads_solution(prompts, completions, **kwargs):
        return [float(c == s) for c, s in zip(completions, kwargs["solution"])]

    for fn in (wants_solution, reads_solution):
        pool = ScoringPool(function_ref(fn, text_prompts=True), 0, timeout_s=30)
        try:
            results = pool.score(SOURCES, TEXTS, TRUTHS, INFOS, prompts=PROMPTS, columns=VERL_ROWS)
        finally:
            pool.close()
        error = results[0].error
        assert "'solution'" in error and "ability, answer, data_source, difficulty, extra_info, ground_truth, " \
                                         "reward_model" in error, error
