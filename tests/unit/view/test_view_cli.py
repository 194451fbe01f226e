"""`hybridrl view`'s flags: loopback by default, and no API key off loopback is refused before serving."""

import pytest

from hybridrl.cli import build_parser, main
from hybridrl.errors import ConfigError
from hybridrl.view.cli import check_access


def test_defaults_bind_this_machine_only(monkeypatch):
    monkeypatch.delenv("HYBRIDRL_API_KEY", raising=False)
    args = build_parser().parse_args(["view", "a", "b"])
    assert (args.runs, args.host, args.port, args.api_key) == (["a", "b"], "127.0.0.1", 8080, None)


@pytest.mark.parametrize("host, key, refused", [("127.0.0.1", None, False), ("localhost", None, False),
                                                ("::1", None, False), ("0.0.0.0", None, True),
                                                ("10.1.2.3", None, True), ("0.0.0.0", "k", False),
                                                ("127.0.0.1", " ", True)])
def test_check_access(host, key, refused):
    if refused:
        with pytest.raises(ConfigError, match="--api-key"):
            check_access(host, key)
    else:
        check_access(host, key)


def test_the_command_refuses_to_start_open_to_the_network(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("HYBRIDRL_API_KEY", raising=False)
    assert main(["view", str(tmp_path), "--host", "0.0.0.0", "--port", "0"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("hybridrl view: error: --host 0.0.0.0:") and "--api-key" in err


def test_the_flag_that_allows_no_key_is_the_only_way_open_and_it_says_so(tmp_path, capsys, monkeypatch):
    """Issue #48 part 3: the same rule as `hybridrl serve` (serve/settings.py)."""
    import uvicorn

    monkeypatch.delenv("HYBRIDRL_API_KEY", raising=False)
    check_access("0.0.0.0", None, allow_no_api_key=True)
    served = {}
    monkeypatch.setattr(uvicorn.Server, "run", lambda server, sockets: served.update(host=server.config.host))
    (tmp_path / "metrics.jsonl").write_text('{"step": 1, "x": 1.0}\n')
    assert main(["view", str(tmp_path), "--host", "0.0.0.0", "--port", "0", "--allow-no-api-key"]) == 0
    assert served == {"host": "0.0.0.0"}
    assert "warning: serving 0.0.0.0 without an API key (--allow-no-api-key)" in capsys.readouterr().err
