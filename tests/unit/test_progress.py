"""hybridrl/progress.py: phases and counts shown as terminal bars or plain log lines."""

import io
import os
import re
import time

import pytest
import torch

from hybridrl import progress
from hybridrl.progress import Reporter, reporting

FAST = dict(after_s=0.2, tick_s=0.02, every_s=1.0)  # thresholds scaled down so a test takes a fraction of a second


def log_of(fn, **kwargs) -> str:
    """What a log-mode (not a TTY) Reporter writes while fn(reporter) runs."""
    stream = io.StringIO()
    with reporting(stream, tty=False, **{**FAST, **kwargs}) as r:
        fn(r)
    return stream.getvalue()


def test_without_a_reporter_everything_is_a_no_op():
    assert progress.active() is None
    with progress.phase("gen") as p:
        assert p is None
        progress.advance(3, "token")
        progress.advance_tokens(torch.ones(4, dtype=torch.bool))
    assert list(progress.counted([1, 2, 3], "micro-batch")) == [1, 2, 3]


def test_a_long_phase_gets_one_line_with_its_counts_and_the_step():
    def work(r):
        for _ in r.steps(3, 3):
            with progress.phase("gen"):
                progress.advance_tokens(torch.tensor([True, True, False]))  # 2 tokens this decoding step
                progress.advance_tokens(torch.tensor([True, False, False]))
                time.sleep(0.3)

    out = log_of(work)
    assert re.fullmatch(r"step 3 gen: 3 tokens in \d+\.\d s\n", out), out


def test_short_phases_and_outer_phases_write_nothing():
    def work(r):
        with progress.phase("step"):  # outer: the inner phases report
            with progress.phase("adv"):
                pass  # far below after_s
            with progress.phase("update_actor"):
                for _ in progress.counted(range(2), "micro-batch"):
                    time.sleep(0.15)

    lines = log_of(work).splitlines()
    assert len(lines) == 1 and lines[0].startswith("update_actor: 2 micro-batches in ")


def test_a_phase_that_runs_long_gets_a_line_every_few_seconds_without_carriage_returns():
    def work(r):
        with progress.phase("update_actor"):
            progress.advance(1, "micro-batch")
            time.sleep(0.75)  # every_s = 0.3: lines at ~0.3 and ~0.6 s, then the end line

    lines = log_of(work, every_s=0.3).splitlines()
    assert lines[0] == "update_actor: running 0 s, 1 micro-batch so far"
    assert 1 <= len(lines) - 1 <= 3 and re.fullmatch(r"update_actor: 1 micro-batch in \d+\.\d s", lines[-1])
    assert all("\r" not in line for line in lines)


def test_validation_counts_prompts_out_of_the_total_and_tokens_beside():
    def work(r):
        with progress.phase("validation", total=10, unit="prompt"):
            progress.advance(256, "token")  # generation inside counts into the same phase
            progress.advance(4, "prompt")
            time.sleep(0.3)

    assert log_of(work).strip().startswith("validation: 4/10 prompts, 256 tokens in ")


def test_on_a_terminal_the_phase_gets_a_bar_line_and_the_steps_a_bar():
    stream = io.StringIO()
    with reporting(stream, tty=True, **FAST) as r:
        for _ in r.steps(1, 2):
            with progress.phase("gen"):
                progress.advance(64, "token")
                time.sleep(0.4)
    out = stream.getvalue()
    assert "training:" in out and "2/2" in out  # the overall bar
    assert re.search(r"gen: 64 tokens \[00:0\d, [\d.]+ tokens/s\]", out)  # the phase's line, redrawn by the ticker


def test_a_bar_with_a_total_shows_the_fraction_done():
    stream = io.StringIO()
    with reporting(stream, tty=True, **FAST):
        with progress.phase("eval", total=8, unit="prompt"):
            progress.advance(2, "prompt")
            time.sleep(0.4)
    assert "eval:  25%|" in stream.getvalue() and "2/8 prompts" in stream.getvalue()


def test_counted_counts_each_item_once_its_work_is_done():
    seen = []
    with reporting(io.StringIO(), tty=False, **FAST) as r:
        with progress.phase("ref") as p:
            for item in progress.counted(["a", "b"], "micro-batch"):
                seen.append((item, p.counts.get("micro-batch", 0)))
            assert p.counts == {"micro-batch": 2}
        assert r.stack == []
    assert seen == [("a", 0), ("b", 1)]


def test_reporting_reuses_the_active_reporter_and_ends_its_thread():
    with reporting(io.StringIO(), tty=False, **FAST) as outer:
        with reporting() as inner:
            assert inner is outer
        assert progress.active() is outer
    assert progress.active() is None and not outer._ticker.is_alive()


def test_write_goes_to_stdout_above_the_bars(capsys):
    with reporting(io.StringIO(), tty=True, **FAST) as r:
        r.write("step 1 | score=0.5")
    progress.write("done")
    assert capsys.readouterr().out == "step 1 | score=0.5\ndone\n"


def test_a_phase_that_raises_ends_without_a_line():
    stream = io.StringIO()
    with reporting(stream, tty=False, **FAST) as r:
        with pytest.raises(ValueError):
            with progress.phase("setup"):
                time.sleep(0.3)  # long enough for a line, had it ended well
                raise ValueError("data.train_files: file not found")  # the error line says what happened
        assert r.stack == []
    assert stream.getvalue() == ""


def test_timed_phases_are_shown():
    from hybridrl.trainer.metrics import timed

    with reporting(io.StringIO(), tty=False, **FAST) as r:
        metrics = {}
        with timed(metrics, "gen"):
            assert [p.name for p in r.stack] == ["gen"]
    assert "timing_s/gen" in metrics


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork only")
def test_a_forked_child_shows_nothing():
    # the reward scorers' pool forks while a phase runs: the child has no ticker and must not draw
    with reporting(io.StringIO(), tty=True, **FAST):
        with progress.phase("reward"):
            pid = os.fork()
            if pid == 0:
                os._exit(0 if progress.active() is None else 1)
            _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 0


def test_reporter_tty_follows_the_stream():
    assert Reporter(io.StringIO()).tty is False


# -- the work's hooks count into the running phase -------------------------------------------------------------


@pytest.fixture(scope="module")
def model_and_tokenizer(random_model_dir):
    from hybridrl.models.loading import load_causal_lm, load_tokenizer

    return load_causal_lm(random_model_dir), load_tokenizer(random_model_dir)


def counts_of(fn) -> dict[str, int]:
    """The units fn() counts into a phase."""
    with reporting(io.StringIO(), tty=False, **FAST), progress.phase("work") as p:
        fn()
    return p.counts


def test_the_hf_engine_counts_every_generated_token(model_and_tokenizer):
    from hybridrl.models.loading import eos_token_ids
    from hybridrl.rollout.base import SamplingParams
    from hybridrl.rollout.hf import HFRolloutEngine

    model, tok = model_and_tokenizer
    engine = HFRolloutEngine(model, eos_token_ids(model, tok), tok.pad_token_id, max_num_seqs=3)  # chunks of 3, 2
    ids, mask = torch.randint(10, 60, (5, 4)), torch.ones(5, 4, dtype=torch.long)
    out = {}
    counts = counts_of(lambda: out.update(g=engine.generate(ids, mask, SamplingParams(6), torch.arange(5))))
    assert counts == {"token": int(out["g"].response_mask.sum())}


def test_log_prob_forwards_count_micro_batches(model_and_tokenizer):
    from hybridrl.batch import Sequences
    from hybridrl.models.forward import batched_log_probs

    model, _ = model_and_tokenizer
    ids = torch.randint(10, 60, (5, 7))
    seqs = Sequences(ids, torch.ones_like(ids), torch.ones(5, 3, dtype=torch.long))
    assert counts_of(lambda: batched_log_probs(model, seqs, 1.0, 2)) == {"micro-batch": 3}  # rows 2 + 2 + 1


def test_the_update_counts_micro_batches():
    from hybridrl.parallel.sharding import Replicated
    from hybridrl.workers.update_loop import UpdatingWorker

    worker = UpdatingWorker()
    worker.module, worker.sharding = torch.nn.Linear(2, 1), Replicated()
    micros = [torch.ones(3, 2), torch.ones(1, 2)]
    assert counts_of(lambda: worker._backward_all(micros, lambda x: worker.module(x).sum())) == {"micro-batch": 2}


def test_validation_counts_prompts_out_of_all(model_and_tokenizer, arith_data):
    from hybridrl.data.dataset import RLDataset
    from hybridrl.models.loading import eos_token_ids
    from hybridrl.rewards.manager import RewardManager
    from hybridrl.rollout.base import SamplingParams, generate_rollout
    from hybridrl.rollout.hf import HFRolloutEngine
    from hybridrl.trainer.validate import validate

    model, tok = model_and_tokenizer
    data = RLDataset([arith_data["val"]], tok, "prompt", 64, max_samples=10)
    engine = HFRolloutEngine(model, eos_token_ids(model, tok), tok.pad_token_id)
    generate = lambda prompts, n, sampling: generate_rollout(engine, prompts, n, sampling)  # noqa: E731
    out = log_of(lambda r: validate(generate, data, RewardManager(tok), SamplingParams(3), 2, tok.pad_token_id,
                                    batch_size=8, label="eval"), after_s=0.0, every_s=1e9)  # the end line only
    assert re.fullmatch(r"eval: 10/10 prompts, \d+ tokens in \d+\.\d s\n", out), out  # batches of 4, 4, 2 prompts


def test_a_closed_stream_never_stops_the_work():
    stream = io.StringIO()
    with reporting(stream, tty=False, **FAST) as r:
        stream.close()  # e.g. the log's pipe went away
        with progress.phase("gen"):
            time.sleep(0.3)  # the end line and the ticker both write to the closed stream
        assert r._ticker.is_alive()
