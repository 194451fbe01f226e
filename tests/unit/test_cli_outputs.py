"""Every command that writes a file or folder checks it before its work: one line, exit code 2, nothing
read or computed first (plot -o, compare --json, data --output, export OUT, model from-gguf OUT_DIR)."""

from __future__ import annotations

import pytest

from hybridrl.cli import main
from hybridrl.models.loading import BUNDLED


@pytest.fixture
def blocker(tmp_path):
    """A regular file: any path below it cannot be created (for root too)."""
    path = tmp_path / "a_file"
    path.write_text("")
    return path


def one_line_error(capsys, command: str) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    prefix = f"hybridrl {command}: error: "
    assert err.startswith(prefix), err
    return err[len(prefix):].strip()


def test_plot_output_checked_before_the_runs_are_read(tmp_path, capsys, blocker):
    missing_run = str(tmp_path / "no_run_here")  # would be an error too, if it were read first
    assert main(["plot", missing_run, "-o", str(blocker / "curves.png")]) == 2
    assert one_line_error(capsys, "plot") == f"-o {blocker}/curves.png: {blocker} is a file, not a folder; give a " \
                                             "path you can write to"
    assert main(["plot", missing_run, "-o", str(tmp_path / "curves.xyz")]) == 2
    assert one_line_error(capsys, "plot") == f"-o {tmp_path}/curves.xyz: cannot write a '.xyz' image; name it .png " \
                                             "(or .pdf, .svg)"


def test_compare_json_checked_before_the_runs_are_read(tmp_path, capsys, blocker):
    assert main(["compare", str(tmp_path / "no_run_here"), "--json", str(tmp_path)]) == 2
    assert one_line_error(capsys, "compare") == f"--json {tmp_path}: is a folder; give a file path"


def test_data_output_checked_before_anything_is_generated(capsys, blocker):
    assert main(["data", "arithmetic", "--output", str(blocker / "arith")]) == 2
    assert one_line_error(capsys, "data") == f"--output {blocker}/arith: {blocker} is a file, not a folder; give a " \
                                             "path you can write to"
    assert main(["data", "gsm8k", "--input", "/nonexistent", "--output", str(blocker)]) == 2
    assert one_line_error(capsys, "data") == f"--output {blocker}: is a file, not a folder; give a folder path"


def test_export_out_checked_before_a_model_loads(capsys, blocker):
    assert main(["export", str(BUNDLED["tiny-arith"]), str(blocker / "out")]) == 2
    assert one_line_error(capsys, "export") == f"OUT {blocker}/out: {blocker} is a file, not a folder; give a path " \
                                               "you can write to"


def test_export_of_a_checkpoint_that_does_not_exist_says_so(tmp_path, capsys):
    assert main(["export", str(tmp_path / "nope"), str(tmp_path / "out")]) == 2
    assert one_line_error(capsys, "export") == f"CHECKPOINT {tmp_path}/nope: no such folder; give a run folder, a " \
                                               "global_step_<N> folder or a HuggingFace model folder"


def test_plot_to_a_name_without_extension(tmp_path, capsys):
    assert main(["plot", str(tmp_path), "-o", str(tmp_path / "curves")]) == 2
    assert one_line_error(capsys, "plot") == f"-o {tmp_path}/curves: cannot write an image without an extension, " \
                                             "which gives its format; name it .png (or .pdf, .svg)"


def test_data_gsm8k_without_input_names_the_flag_and_the_variable(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("HYBRIDRL_DATA_DIR", raising=False)
    assert main(["data", "gsm8k", "--output", str(tmp_path / "out")]) == 2
    assert one_line_error(capsys, "data") == "no input: give --input DIR (a local gsm8k file or folder; nothing is " \
                                             "downloaded), or set HYBRIDRL_DATA_DIR to a folder holding gsm8k/"
    assert main(["data", "math", "--output", str(tmp_path / "out")]) == 2
    assert one_line_error(capsys, "data").endswith("set HYBRIDRL_DATA_DIR to a folder holding math500/")
    assert not (tmp_path / "out").exists()


def test_data_gsm8k_reads_hybridrl_data_dir_when_input_is_absent(tmp_path, capsys, monkeypatch):
    # one GSM8K row (question, answer with '#### 18') under $HYBRIDRL_DATA_DIR/gsm8k/test.jsonl
    (tmp_path / "raw" / "gsm8k").mkdir(parents=True)
    (tmp_path / "raw" / "gsm8k" / "test.jsonl").write_text(
        '{"question": "What is 9+9?", "answer": "9+9=18\\n#### 18"}\n')
    monkeypatch.setenv("HYBRIDRL_DATA_DIR", str(tmp_path / "raw"))
    assert main(["data", "gsm8k", "--output", str(tmp_path / "out")]) == 0
    assert f"wrote {tmp_path / 'out' / 'test.parquet'} (test)" in capsys.readouterr().out
    import pyarrow.parquet as pq
    assert pq.read_table(tmp_path / "out" / "test.parquet").to_pylist()[0]["reward_model"]["ground_truth"] == "18"
