"""`hybridrl serve` flags: defaults, checks (one ConfigError naming the flag), context length, and the
binding rule (a public address needs an API key, or --allow-no-api-key)."""

from __future__ import annotations

import argparse
import re
from types import SimpleNamespace

import pytest

from hybridrl.errors import ConfigError
from hybridrl.serve import build, cli
from hybridrl.serve.settings import ServeSettings, check_settings, is_loopback


def parse(argv: list[str]):
    parser = argparse.ArgumentParser(prog="hybridrl")
    cli.add_parser(parser.add_subparsers(dest="command", required=True))
    return parser.parse_args(argv)


def test_defaults_bind_loopback_and_read_the_key_from_the_environment(monkeypatch):
    monkeypatch.delenv("HYBRIDRL_API_KEY", raising=False)
    s = cli.settings_of(parse(["serve", "tiny-arith"]))
    assert s == ServeSettings("tiny-arith")
    assert (s.host, s.port, s.engine, s.api_key, s.max_n, s.max_body_bytes) == ("127.0.0.1", 8000, "auto", None, 8,
                                                                                1 << 20)
    monkeypatch.setenv("HYBRIDRL_API_KEY", "from-env")
    assert cli.settings_of(parse(["serve", "x"])).api_key == "from-env"
    assert cli.settings_of(parse(["serve", "x", "--api-key", "flag"])).api_key == "flag"


@pytest.mark.parametrize("field, value, flag", [
    ("port", 70000, "--port"), ("max_num_seqs", 0, "--max-num-seqs"), ("max_model_len", 1, "--max-model-len"),
    ("max_tokens_limit", 0, "--max-tokens-limit"), ("max_n", 0, "--max-n"), ("max_body_bytes", 10, "--max-body-bytes"),
    ("api_key", " ", "--api-key"), ("engine", "tgi", "--engine"), ("dtype", "int8", "--dtype"), ("threads", 0, "--threads"),
    ("seed", -1, "--seed"), ("seed", 2 ** 64, "--seed")])
def test_bad_flags_are_config_errors_naming_the_flag(field, value, flag):
    with pytest.raises(ConfigError, match=f"^{flag}[ :]"):
        check_settings(ServeSettings("tiny-arith", **{field: value}))


@pytest.mark.parametrize("host, loopback", [("127.0.0.1", True), ("127.5.0.1", True), ("::1", True),
                                            ("localhost", True), ("0.0.0.0", False), ("192.168.1.4", False),
                                            ("example.com", False)])
def test_is_loopback(host, loopback):
    assert is_loopback(host) is loopback


def test_context_length_defaults_to_the_models_capped_and_refuses_more_than_it_has():
    assert build.context_length(SimpleNamespace(max_position_embeddings=256), None) == 256
    assert build.context_length(SimpleNamespace(max_position_embeddings=32768), None) == 4096
    assert build.context_length(SimpleNamespace(), None) == 4096
    assert build.context_length(SimpleNamespace(max_position_embeddings=256), 100) == 100
    with pytest.raises(ConfigError, match="--max-model-len 300"):
        build.context_length(SimpleNamespace(max_position_embeddings=256), 300)


def test_served_model_name_defaults_to_the_folder_name(tiny, monkeypatch):
    monkeypatch.setattr(build, "pick_engine", lambda engine: "hf")
    service, app_settings, engine = build.build_service(ServeSettings("tiny-arith", max_model_len=128, max_n=3))
    service.close()
    assert (app_settings.model_name, engine, app_settings.limits.max_model_len, app_settings.limits.max_n) == (
        "tiny-arith", "hf", 128, 3)


@pytest.mark.parametrize("host, flags, warned", [("0.0.0.0", ["--allow-no-api-key"], True),
                                                 ("0.0.0.0", ["--api-key", "k"], False),
                                                 ("127.0.0.1", [], False), ("::1", [], False)])
def test_a_public_address_serves_with_a_key_or_the_flag_that_allows_none(monkeypatch, capsys, host, flags, warned):
    import uvicorn

    import hybridrl.serve.app as app_module

    monkeypatch.delenv("HYBRIDRL_API_KEY", raising=False)
    served = {}
    monkeypatch.setattr(build, "build_service", lambda s: (None, SimpleNamespace(
        model_name="m", limits=SimpleNamespace(max_model_len=8)), "hf"))
    monkeypatch.setattr(app_module, "build_app", lambda service, settings: "app")  # run() imports these at call
    # the server runs on the socket cli.run bound before the model loaded (a port in use fails at once)
    monkeypatch.setattr(uvicorn.Server, "run", lambda server, sockets: served.update(
        host=server.config.host, port=server.config.port, bound=sockets[0].getsockname()[1]))
    cli.run(parse(["serve", "m", "--host", host, "--port", "0", *flags]))
    assert served["host"] == host and served["port"] == served["bound"] > 0  # --port 0: the port the system chose
    assert ("without an API key (--allow-no-api-key)" in capsys.readouterr().err) is warned


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.168.1.4", "example.com"])
def test_a_public_address_without_a_key_is_refused_before_the_model_loads(monkeypatch, host):
    """Issue #48 part 3: not a warning any more: one line naming both ways out, and nothing bound or loaded."""
    monkeypatch.delenv("HYBRIDRL_API_KEY", raising=False)
    monkeypatch.setattr(build, "build_service", lambda s: pytest.fail("the model loaded"))
    monkeypatch.setattr(cli, "listen_socket", lambda *a: pytest.fail("bound before the refusal"))
    with pytest.raises(ConfigError, match=rf"^--host {re.escape(host)}: an address other machines can reach, and no "
                                          r"API key: .*set --api-key KEY .* or pass --allow-no-api-key"):
        cli.run(parse(["serve", "m", "--host", host]))
    monkeypatch.setenv("HYBRIDRL_API_KEY", "from-env")  # the key from the environment counts
    check_settings(cli.settings_of(parse(["serve", "m", "--host", host])))


def test_a_port_in_use_is_one_line_before_the_model_loads(monkeypatch):
    import socket

    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    loaded = []
    monkeypatch.setattr(build, "build_service", lambda s: loaded.append(s))
    try:
        with pytest.raises(ConfigError, match=f"^--port {port}: 127.0.0.1:{port} is already in use .*"
                                              f"choose another port, e.g. --port {port + 1}$"):
            cli.run(parse(["serve", "m", "--port", str(port)]))
    finally:
        taken.close()
    assert loaded == []  # refused before the model loads (and before any banner)


@pytest.mark.parametrize("host, message", [("no-such-host.invalid", "--host no-such-host.invalid: not a name or "
                                                                     "address of this machine"),
                                           ("10.255.255.254", "--host 10.255.255.254: not an address of this machine")])
def test_a_host_that_cannot_be_bound_is_one_line(host, message):
    with pytest.raises(ConfigError, match=f"^{re.escape(message)}"):
        cli.listen_socket(host, 0)


def test_every_bad_flag_is_reported_at_once():
    from hybridrl.errors import ConfigErrors

    with pytest.raises(ConfigErrors) as info:
        check_settings(ServeSettings("tiny-arith", port=-1, max_n=0, threads=0))
    assert [m.split(":")[0] for m in info.value.messages] == ["--port -1", "--max-n 0", "--threads 0"]
