"""LineIndex: offsets of complete lines only, growing by appended bytes, starting over on a rewrite."""

from hybridrl.view.index import LineIndex


def test_a_half_written_last_line_is_not_indexed_until_its_newline(tmp_path):
    path = tmp_path / "m.jsonl"
    path.write_bytes(b'{"a": 1}\n{"b": 2}\n{"c": 3')  # a writer mid-line
    idx = LineIndex(str(path))
    assert idx.refresh()
    assert len(idx) == 2 and idx.end == 18
    assert idx.read(0, 5) == [b'{"a": 1}', b'{"b": 2}']
    with open(path, "ab") as f:
        f.write(b'}\n{"d": 4}\n')
    assert idx.refresh()
    assert len(idx) == 4
    assert idx.read(2, 3) == [b'{"c": 3}'] and idx.read(3, 4) == [b'{"d": 4}']


def test_refresh_reads_only_what_was_appended(tmp_path):
    path = tmp_path / "m.jsonl"
    path.write_bytes(b"x\n" * 3)
    idx = LineIndex(str(path))
    idx.refresh()
    assert not idx.refresh()  # unchanged file: nothing to do
    lines, end = idx.read_from(0)
    assert lines == [b"x"] * 3 and end == 6
    with open(path, "ab") as f:
        f.write(b"yy\nzz\n")
    idx.refresh()
    assert idx.read_from(end) == ([b"yy", b"zz"], 12)
    assert idx.read_from(12) == ([], 12)


def test_a_rewritten_shorter_file_is_indexed_again(tmp_path):
    path = tmp_path / "m.jsonl"
    path.write_bytes(b"one\ntwo\nthree\n")
    idx = LineIndex(str(path))
    idx.refresh()
    path.write_bytes(b"uno\n")  # a resumed run rewrites metrics.jsonl up to its checkpoint
    idx.refresh()
    assert idx.generation == 1 and len(idx) == 1 and idx.read(0, 1) == [b"uno"]


def test_a_missing_file_is_empty_and_lines_in_the_middle_read_by_offset(tmp_path):
    idx = LineIndex(str(tmp_path / "none.jsonl"))
    idx.refresh()
    assert len(idx) == 0 and idx.read(0, 10) == []
    path = tmp_path / "big.jsonl"
    path.write_bytes(b"".join(b"line %d\n" % i for i in range(10_000)))
    idx = LineIndex(str(path))
    idx.refresh()
    assert len(idx) == 10_000
    assert idx.read(5_000, 5_002) == [b"line 5000", b"line 5001"]
    assert idx.starts[5_000] == sum(len(b"line %d\n" % i) for i in range(5_000))
