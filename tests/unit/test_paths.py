"""Output paths checked before the work (hybridrl/paths.py): one line naming the flag (or key) and the path.

The tests run as any user, root included, so "cannot write" is made with a path under a regular file
(no permission bits involved)."""

from __future__ import annotations

import os
import re

import pytest

from hybridrl.errors import ConfigError
from hybridrl.paths import check_output_file, check_output_folder


def test_a_writable_file_path_passes_and_nothing_is_created(tmp_path):
    target = tmp_path / "new" / "deeper" / "out.json"
    check_output_file(str(target), "--output")
    assert os.listdir(tmp_path) == []  # the probe was removed; the command creates the folders itself


def test_an_existing_file_is_not_truncated_by_the_check(tmp_path):
    target = tmp_path / "out.json"
    target.write_text("keep")
    check_output_file(str(target), "--output")
    assert target.read_text() == "keep"


@pytest.mark.parametrize("check, kind", [(check_output_file, "file"), (check_output_folder, "folder")])
def test_a_path_under_a_file_cannot_be_written(tmp_path, check, kind):
    blocker = tmp_path / "a_file"
    blocker.write_text("x")
    with pytest.raises(ConfigError, match=f"^{re.escape(f'--out {blocker}/sub/x: {blocker} is a file, not a folder')}"):
        check(str(blocker / "sub" / "x"), "--out")


def test_a_folder_given_for_a_file_and_a_file_for_a_folder(tmp_path):
    with pytest.raises(ConfigError, match=re.escape(f"--json {tmp_path}: is a folder; give a file path")):
        check_output_file(str(tmp_path), "--json")
    f = tmp_path / "f"
    f.write_text("")
    with pytest.raises(ConfigError, match=re.escape(f"--output {f}: is a file, not a folder; give a folder path")):
        check_output_folder(str(f), "--output")


def test_a_read_only_place_is_refused(tmp_path):
    # /proc takes no new files, for root too
    with pytest.raises(ConfigError, match=r"^-o /proc/curves\.png: cannot write in /proc \(.*\); give a path you can "
                                          r"write to$"):
        check_output_file("/proc/curves.png", "-o")


def test_a_config_key_is_named_as_key_equals_value(tmp_path):
    blocker = tmp_path / "f"
    blocker.write_text("")
    with pytest.raises(ConfigError, match=re.escape(f"trainer.rollout_data_dir='{blocker}/d': {blocker} is a file")):
        check_output_folder(str(blocker / "d"), "trainer.rollout_data_dir")


def test_empty_paths_are_refused():
    with pytest.raises(ConfigError, match="^--output: give a file path \\(got an empty one\\)$"):
        check_output_file("", "--output")
