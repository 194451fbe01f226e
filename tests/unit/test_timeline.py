"""The phase timeline's recorder and writer (hybridrl/timeline.py): Chrome-trace events, nesting, off costs
nothing, drains hand over only new events, the file is replaced whole."""

import json
import os
import time

import pytest

from hybridrl import timeline
from hybridrl.timeline import Recorder, TimelineWorker, TimelineWriter, recorded

SPAN_KEYS = {"name", "ph", "ts", "dur", "pid", "tid", "args"}


@pytest.fixture
def rec():
    r = Recorder()
    r.enable("driver", sort_index=-1)
    return r


@pytest.fixture
def process_recorder():
    """The module's own recorder, left off whatever the test does."""
    yield timeline.RECORDER
    timeline.disable()


def spans(events):
    return [e for e in events if e["ph"] == "X"]


def test_events_are_chrome_trace_spans_headed_by_the_track_name(rec):
    with rec.span("gen", step=3):
        time.sleep(0.002)
    events = rec.drain()
    meta = [e for e in events if e["ph"] == "M"]
    assert {(e["name"], tuple(e["args"].values())) for e in meta} == {("process_name", ("driver",)),
                                                                      ("process_sort_index", (-1,))}
    assert all(e["pid"] == os.getpid() for e in events)
    [gen] = spans(events)
    assert set(gen) == SPAN_KEYS and gen["name"] == "gen" and gen["args"] == {"step": 3}
    assert gen["dur"] >= 2000  # microseconds
    assert abs(gen["ts"] + gen["dur"] - time.time_ns() // 1000) < 1_000_000  # wall clock: comparable across processes


def test_a_phase_lies_within_its_step(rec):
    with rec.span("step"):
        with rec.span("update_actor"):
            time.sleep(0.001)
    inner, outer = spans(rec.drain())  # completed first, recorded first
    assert (inner["name"], outer["name"]) == ("update_actor", "step")
    assert outer["ts"] <= inner["ts"] and inner["ts"] + inner["dur"] <= outer["ts"] + outer["dur"]


def test_a_span_that_raises_is_still_recorded(rec):
    with pytest.raises(ValueError):
        with rec.span("reward"):
            raise ValueError("boom")
    assert [e["name"] for e in spans(rec.drain())] == ["reward"]


def test_off_records_nothing_and_returns_one_shared_no_op():
    r = Recorder()
    assert r.span("gen") is r.span("update_actor")  # no object made per call while off
    with r.span("gen"):
        pass
    assert r.drain() == []


def test_drain_returns_only_the_new_events(rec):
    with rec.span("a"):
        pass
    first = rec.drain()
    with rec.span("b"):
        pass
    assert [e["name"] for e in spans(first)] == ["a"]
    assert [e["name"] for e in rec.drain()] == ["b"]  # no metadata again, no "a"
    assert rec.drain() == []


def test_disable_drops_the_undrained_events_and_the_step_arg(process_recorder):
    timeline.enable("driver")
    timeline.set_args(step=2)
    with timeline.span("gen"):
        pass
    timeline.disable()
    assert timeline.drain() == [] and process_recorder.args == {}


def test_set_args_tags_every_later_span_and_a_span_can_override(process_recorder):
    timeline.enable("driver")
    timeline.set_args(step=1)
    with timeline.span("gen"):
        pass
    timeline.set_args(step=2)
    with timeline.span("testing", step=0):
        pass
    assert [e["args"] for e in spans(timeline.drain())] == [{"step": 1}, {"step": 0}]


def test_a_worker_class_records_its_decorated_calls_and_hands_them_over(process_recorder):
    class Worker(TimelineWorker):
        @recorded
        def generate(self, n):
            return 2 * n

    w = Worker()
    assert w.generate(3) == 6 and w.timeline_events() == []  # not enabled: nothing recorded
    w.timeline_enable("rollout rank 1", 1)
    assert w.generate(4) == 8
    events = w.timeline_events()
    assert [e["name"] for e in spans(events)] == ["generate"]
    assert {"name": "rollout rank 1"} in [e["args"] for e in events if e["ph"] == "M"]


def test_the_writer_merges_sources_and_replaces_the_file_whole(tmp_path, rec):
    path = tmp_path / "sub" / "t.json"
    other = [{"name": "policy_update", "ph": "X", "ts": 1, "dur": 2, "pid": 99, "tid": 99, "args": {}}]
    writer = TimelineWriter(str(path), [rec.drain, lambda: list(other)], every_s=3600)
    with rec.span("step", step=1):
        pass
    writer.flush()  # the first flush writes
    first = json.loads(path.read_text())["traceEvents"]
    assert {e["name"] for e in spans(first)} == {"step", "policy_update"}
    with rec.span("step", step=2):
        pass
    writer.flush()  # within every_s: collected, not written
    assert json.loads(path.read_text())["traceEvents"] == first
    writer.flush(force=True)
    names = [e["name"] for e in spans(json.loads(path.read_text())["traceEvents"])]
    assert sorted(names) == ["policy_update"] * 3 + ["step"] * 2  # the worker source answered at each flush
    assert os.listdir(path.parent) == ["t.json"]  # no temporary file left beside it


def test_a_failed_write_leaves_the_previous_file(tmp_path, monkeypatch, rec):
    path = tmp_path / "t.json"
    writer = TimelineWriter(str(path), [rec.drain], every_s=0)
    writer.flush()
    before = path.read_text()
    writer.add([{"name": "bad", "ph": "X", "ts": 0, "dur": 0, "pid": 1, "tid": 1, "args": {"x": object()}}])
    with pytest.raises(TypeError):  # not JSON: the dump fails half way, in the temporary file
        writer.write()
    assert path.read_text() == before and os.listdir(tmp_path) == ["t.json"]
