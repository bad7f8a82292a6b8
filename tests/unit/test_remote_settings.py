"""`serve`'s settings (acp_server/remote/settings.py): flag > ACP_SERVER_* variable > the config file's `[serve]`
table > default, one setting at a time, and a value that cannot be used stops the start with what to change."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pytest

from acp_server.errors import ServeSetupError
from acp_server.remote.settings import RemoteSettings, add_arguments, parse_listen, remote_settings

STATE = Path("/tmp/acp-test-state")


def settings(argv: list[str], env: dict[str, str] | None = None, file: dict[str, Any] | None = None) -> RemoteSettings:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return remote_settings(parser.parse_args(argv), env or {}, {"serve": file or {}}, STATE)


def test_the_defaults_listen_on_loopback_with_the_default_token_file() -> None:
    got = settings([])
    assert (got.host, got.port, got.token_file, got.max_connections) == ("127.0.0.1", 8765, None, 256)
    assert got.initialize_timeout == 10.0 and not got.tls and got.state_dir == STATE


def test_a_flag_wins_over_the_environment_which_wins_over_the_file() -> None:
    file = {"listen": "127.0.0.1:1", "max_connections": 3, "allow_origin": ["https://file.example"]}
    env = {"ACP_SERVER_LISTEN": "127.0.0.1:2", "ACP_SERVER_ALLOW_ORIGIN": "https://a.example, https://b.example"}
    assert settings([], {}, file).port == 1
    assert settings([], {}, file).allow_origins == ("https://file.example",)
    assert settings([], env, file).port == 2
    assert settings([], env, file).allow_origins == ("https://a.example", "https://b.example")
    assert settings(["--listen", "[::1]:3"], env, file).host == "::1"
    assert settings(["--allow-origin", "https://c.example"], env, file).allow_origins == ("https://c.example",)
    assert settings([], {"ACP_SERVER_MAX_CONNECTIONS": " "}, file).max_connections == 3  # empty counts as unset


@pytest.mark.parametrize(
    ("argv", "env", "file", "why"),
    [
        (["--listen", "0.0.0.0:8765"], {}, {}, "without TLS"),
        ([], {"ACP_SERVER_LISTEN": "example.org:80"}, {}, "without TLS"),
        ([], {}, {"listen": "8765"}, "HOST:PORT"),
        ([], {}, {"listen": "::1:8765"}, "brackets"),
        ([], {}, {"listen": "127.0.0.1:70000"}, "65535"),
        ([], {"ACP_SERVER_MAX_CONNECTIONS": "0"}, {}, "above zero"),
        ([], {}, {"initialize_timeout": True}, "a number"),
        ([], {}, {"insecure_no_tls": "maybe"}, "true or false"),
        (["--certfile", "c.pem"], {}, {}, "both"),
    ],
)
def test_a_value_that_cannot_be_used_stops_the_start(
    argv: list[str], env: dict[str, str], file: dict[str, Any], why: str
) -> None:
    with pytest.raises(ServeSetupError, match=why):
        settings(argv, env, file)


def test_off_loopback_starts_with_tls_or_an_explicit_insecure_no_tls() -> None:
    assert settings(["--listen", "0.0.0.0:8765", "--insecure-no-tls"]).insecure_no_tls
    assert settings(["--listen", "0.0.0.0:8765"], {"ACP_SERVER_INSECURE_NO_TLS": "1"}).insecure_no_tls
    assert settings(["--listen", "0.0.0.0:8765", "--certfile", "c", "--keyfile", "k"]).tls


def test_listen_addresses_parse_with_ipv6_in_brackets() -> None:
    assert parse_listen("localhost:0") == ("localhost", 0)
    assert parse_listen("[::]:8765") == ("::", 8765)


def test_allow_mcp_host_and_principals_trust_each_other_come_from_flag_environment_or_file() -> None:
    assert settings([]).allow_mcp_hosts == () and not settings([]).principals_trust_each_other
    got = settings(
        ["--allow-mcp-host", "MCP.internal", "--allow-mcp-host", "10.0.0.5", "--principals-trust-each-other"]
    )
    assert got.allow_mcp_hosts == ("mcp.internal", "10.0.0.5") and got.principals_trust_each_other
    env = {"ACP_SERVER_ALLOW_MCP_HOST": "a.example, b.example", "ACP_SERVER_PRINCIPALS_TRUST_EACH_OTHER": "yes"}
    got = settings([], env)
    assert got.allow_mcp_hosts == ("a.example", "b.example") and got.principals_trust_each_other
    got = settings([], file={"allow_mcp_host": ["c.example"], "principals_trust_each_other": True})
    assert got.allow_mcp_hosts == ("c.example",) and got.principals_trust_each_other
    with pytest.raises(ServeSetupError, match="principals_trust_each_other"):
        settings([], file={"principals_trust_each_other": "perhaps"})


def test_the_replica_name_comes_from_flag_environment_or_file_and_must_fit_a_cookie() -> None:
    assert settings([]).replica_name is None  # unnamed: no affinity cookie
    assert settings(["--replica-name", "a"], {"ACP_SERVER_REPLICA_NAME": "b"}).replica_name == "a"
    assert settings([], {"ACP_SERVER_REPLICA_NAME": "b"}, {"replica_name": "c"}).replica_name == "b"
    assert settings([], file={"replica_name": "eu-1.replica_2"}).replica_name == "eu-1.replica_2"
    for bad in ("a;b", "a b", "", "x" * 64, "é", ".a"):
        with pytest.raises(ServeSetupError, match="--replica-name"):
            settings(["--replica-name", bad])
    with pytest.raises(ServeSetupError, match="--replica-name"):
        settings([], {"ACP_SERVER_REPLICA_NAME": "-a"})


def test_several_principals_are_refused_where_landlock_is_missing_unless_they_trust_each_other(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from acp_server.cli import serve
    from acp_server.runtime import sandbox
    from acp_server.settings.config import Config

    monkeypatch.setattr(sandbox, "landlock_support", lambda: sandbox.Support(0, "this kernel (4.19) has no Landlock"))
    with pytest.raises(ServeSetupError, match=r"refusing to serve 2 principals: no sandbox can be had here: this kern"):
        serve.admit_principals(2, Config(), settings([]))
    serve.admit_principals(1, Config(), settings([]))  # one principal: nobody else's files to keep apart
    serve.admit_principals(2, Config(), settings(["--principals-trust-each-other"]))
