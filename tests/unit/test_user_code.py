"""user_code.where: an error is located in the user's file even when a library frame is innermost
(wandb wraps sys.exit, the standard library raises inside itself)."""
import json
import sys

from hybridrl.user_code import failure, import_file, where


def _raised(fn) -> BaseException:
    try:
        fn()
    except BaseException as e:  # noqa: BLE001 (SystemExit too, as user code may raise it)
        return e
    raise AssertionError("no error")


def test_where_names_the_users_line_not_the_librarys(tmp_path):
    user = tmp_path / "my_reward.py"
    user.write_text("import json\n\ndef score(s):\n    return json.loads(s)\n")
    mod = import_file(str(user), "my_reward_where", "custom_reward_function.path")
    e = _raised(lambda: mod.score("{"))
    assert json.decoder.__file__.endswith("decoder.py")  # the innermost frame is the standard library's
    assert where(e) == f" (at {user}:4)"


def test_a_wrapped_sys_exit_still_points_at_the_user(tmp_path, monkeypatch):
    real_exit = sys.exit

    def library_exit(code=None):  # what wandb's exit hook does: sys.exit replaced by a library function
        real_exit(code)

    library_exit.__code__ = library_exit.__code__.replace(co_filename=json.__file__)  # "defined" in the stdlib
    monkeypatch.setattr(sys, "exit", library_exit)
    user = tmp_path / "exits.py"
    user.write_text("import sys\n\ndef score(s):\n    sys.exit(4)\n")
    mod = import_file(str(user), "exits_where", "custom_reward_function.path")
    e = _raised(lambda: mod.score("x"))
    assert failure(e) == "it called sys.exit(4)" and where(e) == f" (at {user}:4)"


def test_without_a_user_frame_the_innermost_frame_is_named():
    e = _raised(lambda: json.loads("{"))
    tb = e.__traceback__
    while tb.tb_frame.f_code.co_filename == __file__ or "<lambda>" == tb.tb_frame.f_code.co_name:
        tb = tb.tb_next  # drop this file's frames: only the standard library's remain
    e.__traceback__ = tb
    assert "decoder.py:" in where(e)
    assert where(ValueError("no traceback")) == ""
