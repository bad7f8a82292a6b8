"""The config file: every flag's setting, precedence (flags > environment > file > defaults), MCP servers in ACP's
shape, and problems reported in plain words while the server still starts where that is safe.

The precedence tests call `cli.load` with an explicit environment and a real file (fast, and every level is seen);
the end-to-end ones start the real server over stdio and read what it answers.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from acp_server.settings.checks import load_settings
from acp_server.settings.command_line import PROMPT_POLICY_IDS, load
from acp_server.settings.config import Config
from acp_server.settings.files import provider_credentials, read_config_file
from tests.conftest import StartServer
from tests.support.wire_schema import _validator

NO_KEYS = {"OPENAI_API_KEY": "", "OPENAI_BASE_URL": "", "ANTHROPIC_API_KEY": "", "ANTHROPIC_AUTH_TOKEN": ""}


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.toml"
    path.write_text(text)
    return path


def option(options: list[dict[str, Any]], option_id: str) -> dict[str, Any]:
    return next(o for o in options if o["id"] == option_id)


# --- precedence, one setting at a time ---

Getter = Callable[[Config], Any]


@dataclass(frozen=True)
class Setting:
    """One setting at every level: its file line, its variable, its flags, and what each gives."""

    name: str
    line: str
    from_file: Any
    variable: tuple[str, str]
    from_env: Any
    flags: list[str]
    from_flags: Any
    default: Any
    get: Getter


SETTINGS = [
    Setting(
        "model",
        'model = "openai:from-file"',
        "openai:from-file",
        ("ACP_SERVER_MODEL", "openai:from-env"),
        "openai:from-env",
        ["--model", "openai:from-flag"],
        "openai:from-flag",
        "echo",
        lambda c: c.model,
    ),
    Setting(
        "permission_mode",
        'permission_mode = "read_only"',
        "read_only",
        ("ACP_SERVER_PERMISSION_MODE", "bypass"),
        "bypass",
        ["--permission-mode", "accept_edits"],
        "accept_edits",
        "default",
        lambda c: c.permission_mode,
    ),
    Setting(
        "prompt_policy",
        'prompt_policy = "queue"',
        "queue",
        ("ACP_SERVER_PROMPT_POLICY", "reject"),
        "reject",
        ["--prompt-policy", "steer"],
        "steer",
        "interrupt",
        lambda c: c.prompt_policy,
    ),
    Setting(
        "protocol",
        "protocol = 1",
        1,
        ("ACP_SERVER_PROTOCOL", "2"),
        2,
        ["--protocol", "1"],
        1,
        2,
        lambda c: c.protocol,
    ),
    Setting(
        "cleanup_deadline",
        "cleanup_deadline = 3.5",
        3.5,
        ("ACP_SERVER_CLEANUP_DEADLINE", "4.5"),
        4.5,
        ["--cleanup-deadline", "5.5"],
        5.5,
        2.0,
        lambda c: c.cleanup_deadline,
    ),
    Setting(
        "lease_ttl",
        "lease_ttl = 4",
        4.0,
        ("ACP_SERVER_LEASE_TTL", "6.5"),
        6.5,
        ["--lease-ttl", "8"],
        8.0,
        15.0,
        lambda c: c.lease_ttl,
    ),
    Setting(
        "mcp_start_wait",
        "mcp_start_wait = 30",
        30.0,
        ("ACP_SERVER_MCP_START_WAIT", "40"),
        40.0,
        ["--mcp-start-wait", "50"],
        50.0,
        10.0,
        lambda c: c.mcp_start_wait,
    ),
    Setting(
        "max_turn_requests",
        "max_turn_requests = 7",
        7,
        ("ACP_SERVER_MAX_TURN_REQUESTS", "8"),
        8,
        ["--max-turn-requests", "9"],
        9,
        50,
        lambda c: c.max_turn_requests,
    ),
    Setting(
        "state_dir",
        'state_dir = "/srv/from-file"',
        "/srv/from-file",
        ("ACP_SERVER_STATE_DIR", "/srv/from-env"),
        "/srv/from-env",
        ["--state-dir", "/srv/from-flag"],
        "/srv/from-flag",
        None,
        lambda c: c.state_dir,
    ),
    Setting(
        "log_level",
        'log_level = "info"',
        "info",
        ("ACP_SERVER_LOG", "debug"),
        "debug",
        ["--log-level", "error"],
        "error",
        "warning",
        lambda c: c.log_level,
    ),
    Setting(
        "store",
        "store = false",
        False,
        ("ACP_SERVER_NO_STORE", "0"),
        True,
        ["--no-store"],
        False,
        True,
        lambda c: c.store,
    ),
    Setting(
        "model_discovery",
        "model_discovery = false",
        False,
        ("ACP_SERVER_MODEL_DISCOVERY", "1"),
        True,
        ["--no-model-discovery"],
        False,
        True,
        lambda c: c.model_discovery,
    ),
    Setting(
        "keep_sessions_days",
        "keep_sessions_days = 30",
        30.0,
        ("ACP_SERVER_KEEP_SESSIONS_DAYS", "7.5"),
        7.5,
        ["--keep-sessions-days", "0"],
        0.0,
        90.0,
        lambda c: c.keep_sessions_days,
    ),
    Setting(
        "keep_sessions",
        "keep_sessions = 20",
        20,
        ("ACP_SERVER_KEEP_SESSIONS", "0"),
        0,
        ["--keep-sessions", "5"],
        5,
        500,
        lambda c: c.keep_sessions,
    ),
    Setting(
        "log_file",
        'log_file = "/var/tmp/from-file.log"',
        (True, "/var/tmp/from-file.log"),
        ("ACP_SERVER_LOG_FILE", "off"),
        (False, None),
        ["--log-file", "/var/tmp/from-flag.log"],
        (True, "/var/tmp/from-flag.log"),
        (True, None),
        lambda c: (c.log_to_file, c.log_file),
    ),
    Setting(
        "sandbox",
        'sandbox = "read-only"',
        "read-only",
        ("ACP_SERVER_SANDBOX", "off"),
        "off",
        ["--sandbox", "workspace-write"],
        "workspace-write",
        "workspace-write",
        lambda c: c.sandbox,
    ),
    Setting(
        "sandbox_network",
        "sandbox_network = false",
        False,
        ("ACP_SERVER_SANDBOX_NETWORK", "1"),
        True,
        ["--no-sandbox-network"],
        False,
        True,
        lambda c: c.sandbox_network,
    ),
    Setting(
        "sandbox_writable",
        'sandbox_writable = ["/srv/cache", "~/.cargo"]',
        ("/srv/cache", str(Path.home() / ".cargo")),
        ("ACP_SERVER_SANDBOX_WRITABLE", f"/srv/b{os.pathsep}/srv/c"),
        ("/srv/b", "/srv/c"),
        ["--sandbox-writable", "/srv/d", "--sandbox-writable", "/srv/e"],
        ("/srv/d", "/srv/e"),
        (),
        lambda c: c.sandbox_writable,
    ),
    Setting(
        "store_url",
        'store_url = "postgresql://from-file@db.internal/acp"',
        "postgresql://from-file@db.internal/acp",
        ("ACP_SERVER_STORE_URL", "postgresql://from-env@db.internal:5433/acp"),
        "postgresql://from-env@db.internal:5433/acp",
        ["--store-url", "postgres://from-flag@127.0.0.1/acp"],
        "postgres://from-flag@127.0.0.1/acp",
        None,
        lambda c: c.store_url,
    ),
    Setting(
        "allow_provider_host",
        'allow_provider_host = ["gw.internal"]',
        ("gw.internal",),
        ("ACP_SERVER_ALLOW_PROVIDER_HOST", "a.example, B.example"),
        ("a.example", "b.example"),
        ["--allow-provider-host", "127.0.0.1", "--allow-provider-host", "GW.example"],
        ("127.0.0.1", "gw.example"),
        (),
        lambda c: c.allow_provider_hosts,
    ),
]


@pytest.mark.parametrize("setting", SETTINGS, ids=[s.name for s in SETTINGS])
def test_each_setting_comes_from_flag_then_environment_then_file_then_default(tmp_path: Path, setting: Setting) -> None:
    path = tmp_path / "config.toml"
    base = {"ACP_SERVER_CONFIG": str(path)}
    assert setting.get(load([], env=base).config) == setting.default  # no file at all
    path.write_text(setting.line + "\n")
    assert setting.get(load([], env=base).config) == setting.from_file
    with_env = {**base, setting.variable[0]: setting.variable[1]}
    assert setting.get(load([], env=with_env).config) == setting.from_env
    assert setting.get(load(setting.flags, env=with_env).config) == setting.from_flags
    assert load(setting.flags, env=with_env).file.problems == ()


def test_an_empty_environment_variable_counts_as_unset(tmp_path: Path) -> None:
    path = write(tmp_path, 'permission_mode = "read_only"\n')
    config = load([], env={"ACP_SERVER_CONFIG": str(path), "ACP_SERVER_PERMISSION_MODE": ""}).config
    assert config.permission_mode == "read_only"


def test_a_bad_environment_variable_is_a_usage_error_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        load([], env={"ACP_SERVER_CONFIG": str(tmp_path / "none.toml"), "ACP_SERVER_PROMPT_POLICY": "later"})
    assert exited.value.code == 2
    assert "ACP_SERVER_PROMPT_POLICY='later'" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("flags", "env", "named"),
    [
        (["--lease-ttl", "0.5"], {}, "--lease-ttl: must be 1 to 3600 seconds: '0.5'"),
        (["--lease-ttl", "inf"], {}, "--lease-ttl: must be 1 to 3600 seconds: 'inf'"),
        ([], {"ACP_SERVER_LEASE_TTL": "nan"}, "ACP_SERVER_LEASE_TTL='nan': must be 1 to 3600 seconds"),
        ([], {"ACP_SERVER_LEASE_TTL": "soon"}, "ACP_SERVER_LEASE_TTL='soon': not a number of seconds"),
    ],
    ids=["too-short", "infinite", "nan", "words"],
)
def test_a_lease_ttl_out_of_range_is_a_usage_error_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flags: list[str], env: dict[str, str], named: str
) -> None:
    with pytest.raises(SystemExit) as exited:
        load(flags, env={"ACP_SERVER_CONFIG": str(tmp_path / "none.toml"), **env})
    assert exited.value.code == 2
    assert named in capsys.readouterr().err


@pytest.mark.parametrize(
    ("flags", "env", "named"),
    [
        (["--sandbox-writable", "/srv/ok", "--sandbox-writable", "cache"], {}, "--sandbox-writable 'cache'"),
        ([], {"ACP_SERVER_SANDBOX_WRITABLE": f"/srv/ok{os.pathsep}./build"}, "ACP_SERVER_SANDBOX_WRITABLE './build'"),
    ],
    ids=["flag", "variable"],
)
def test_a_relative_sandbox_writable_from_a_flag_or_variable_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flags: list[str], env: dict[str, str], named: str
) -> None:
    with pytest.raises(SystemExit) as exited:
        load(flags, env={"ACP_SERVER_CONFIG": str(tmp_path / "none.toml"), **env})
    assert exited.value.code == 2
    assert f"{named}: must be an absolute path (or start with ~)" in capsys.readouterr().err


def test_whether_the_sandbox_mode_was_asked_for_by_name_is_recorded_from_every_source(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    base = {"ACP_SERVER_CONFIG": str(path)}
    assert not load([], env=base).config.sandbox_explicit  # the default
    assert not load([], env={**base, "ACP_SERVER_SANDBOX": ""}).config.sandbox_explicit  # empty is unset
    assert load(["--sandbox", "workspace-write"], env=base).config.sandbox_explicit
    assert load([], env={**base, "ACP_SERVER_SANDBOX": "read-only"}).config.sandbox_explicit
    path.write_text('sandbox = "workspace-write"\n')
    assert load([], env=base).config.sandbox_explicit


def test_relative_paths_in_the_file_are_relative_to_the_file_and_tilde_is_home(tmp_path: Path) -> None:
    path = write(tmp_path, 'state_dir = "sessions"\nlog_file = "~/acp.log"\n')
    config = load([], env={"ACP_SERVER_CONFIG": str(path)}).config
    assert config.state_dir == str(tmp_path / "sessions")
    assert config.log_file == str(Path.home() / "acp.log")


def test_provider_endpoint_and_key_follow_the_same_precedence(tmp_path: Path) -> None:
    document = read_config_file(
        write(
            tmp_path,
            'base_url = "http://top.example/v1"\n'
            "[providers.openai]\n"
            'base_url = "http://section.example/v1"\napi_key_env = "MY_KEY"\napi_key = "sk-file-0123456789"\n',
        )
    )

    def creds(env: dict[str, str], flag: str | None = None) -> tuple[str | None, str | None, str | None]:
        c = provider_credentials("openai", document, env, flag, "openai:gpt-4o")
        return c.base_url, c.api_key, c.key_source

    assert creds({}) == ("http://section.example/v1", "sk-file-0123456789", "the config file (api_key)")
    only_top = {k: v for k, v in document.items() if k != "providers"}
    assert provider_credentials("openai", only_top, {}, None, "openai:m").base_url == "http://top.example/v1"
    env = {"MY_KEY": "sk-named-0123456789", "OPENAI_BASE_URL": "http://env.example/v1"}
    assert creds(env)[:2] == ("http://env.example/v1", "sk-named-0123456789")
    assert "MY_KEY" in (creds(env)[2] or "")
    env["OPENAI_API_KEY"] = "sk-env-0123456789"
    assert creds(env, "http://flag.example/v1") == (
        "http://flag.example/v1",
        "sk-env-0123456789",
        "environment variable OPENAI_API_KEY",
    )
    # ACP_SERVER_BASE_URL is the environment's name for the flag: it reaches the providers as the flag does.
    config = load([], env={"ACP_SERVER_CONFIG": str(tmp_path / "none.toml"), "ACP_SERVER_BASE_URL": "http://e/v1"})
    assert config.config.base_url == "http://e/v1"


def test_prompt_policy_choices_agree_with_the_session_option() -> None:
    from acp_server.agent.sessions.options import PROMPT_POLICIES

    assert tuple(p.value for p in PROMPT_POLICIES) == PROMPT_POLICY_IDS


# --- MCP servers ---


def test_mcp_server_tables_become_acp_mcp_server_objects(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "[mcp_servers.files]\n"
        'command = "/usr/bin/mcp-files"\nargs = ["--root", "/src"]\nenv = { ROOT = "/src", DEBUG = "1" }\n'
        'cwd = "work"\n'
        "[mcp_servers.search]\n"
        'type = "http"\nurl = "https://mcp.example/mcp"\nheaders = { Authorization = "Bearer abc" }\n'
        "[mcp_servers.legacy]\n"
        'type = "sse"\nurl = "http://127.0.0.1:8000/sse"\n',
    )
    servers = load([], env={"ACP_SERVER_CONFIG": str(path)}).config.mcp_servers
    assert servers == (
        {
            "name": "files",
            "command": "/usr/bin/mcp-files",
            "args": ["--root", "/src"],
            "env": [{"name": "ROOT", "value": "/src"}, {"name": "DEBUG", "value": "1"}],
            "_meta": {"acpServer": {"cwd": str(tmp_path / "work")}},
        },
        {
            "type": "http",
            "name": "search",
            "url": "https://mcp.example/mcp",
            "headers": [{"name": "Authorization", "value": "Bearer abc"}],
        },
        {"type": "sse", "name": "legacy", "url": "http://127.0.0.1:8000/sse", "headers": []},
    )
    for server in servers:
        _validator("McpServer").validate(server)


def test_a_wrong_mcp_server_is_left_out_and_the_others_kept(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        '[mcp_servers.good]\ncommand = "good-server"\n'
        '[mcp_servers.no_command]\nargs = ["x"]\n'
        '[mcp_servers.mixed]\ncommand = "x"\nurl = "http://127.0.0.1/mcp"\n'
        '[mcp_servers.bad_env]\ncommand = "x"\nenv = { TOKEN = 5 }\n'
        '[mcp_servers.odd]\ntype = "websocket"\nurl = "ws://x"\n',
    )
    loaded = load([], env={"ACP_SERVER_CONFIG": str(path)})
    assert [s["name"] for s in loaded.config.mcp_servers] == ["good"]
    messages = {p.key: p.message for p in loaded.file.problems}
    assert "command is missing" in messages["mcp_servers.no_command"]
    assert "url belongs to an http or sse server" in messages["mcp_servers.mixed"]
    assert "env:" in messages["mcp_servers.bad_env"] and "table of text values" in messages["mcp_servers.bad_env"]
    assert "stdio, http or sse" in messages["mcp_servers.odd"]
    assert all("left out" in m for m in messages.values())


def test_tools_env_deny_and_the_held_secrets_reach_the_config(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        '[providers.anthropic]\napi_key = "sk-ant-from-the-file-123"\n'
        '[providers.openai]\napi_key_env = "MY_OPENAI_KEY"\n'
        '[mcp_servers.gh]\ncommand = "gh-mcp"\n'
        'env = { GITHUB_TOKEN = "ghp_for_the_server_123", DEBUG = "verbose-mode" }\n'
        '[tools]\nenv_deny = ["AWS_*", "NPM_TOKEN"]\n',
    )
    env = {**NO_KEYS, "ACP_SERVER_CONFIG": str(path), "MY_OPENAI_KEY": "sk-named-by-the-file-123", "GITHUB_TOKEN": "x"}
    loaded = load([], env=env)
    assert loaded.file.problems == ()
    assert loaded.config.env_deny == ("AWS_*", "NPM_TOKEN")
    assert set(loaded.config.held_secrets) == {
        "sk-ant-from-the-file-123",
        "sk-named-by-the-file-123",
        "ghp_for_the_server_123",
    }
    assert "MY_OPENAI_KEY" in loaded.config.secret_variables and "OPENAI_API_KEY" in loaded.config.secret_variables
    assert "GITHUB_TOKEN" not in loaded.config.secret_variables  # the user's own: it passes to commands


@pytest.mark.parametrize(
    ("table", "message", "denied"),
    [
        ('[tools]\nenv_deny = "AWS_*"\n', "expected a list of names", ("AWS_*",)),
        ('[tools]\nenv_deny = ["A B", "NPM_TOKEN", 3]\n', "that entry is ignored", ("NPM_TOKEN",)),
        ("[tools]\nenv_deny = 3\n", "ignored", ()),
    ],
)
def test_a_wrong_env_deny_is_reported_and_what_can_be_read_is_still_denied(
    tmp_path: Path, table: str, message: str, denied: tuple[str, ...]
) -> None:
    loaded = load([], env={"ACP_SERVER_CONFIG": str(write(tmp_path, table + "[tools.x]\n"))})
    problems = {p.key: p.message for p in loaded.file.problems}
    assert message in problems["tools.env_deny"]
    assert "unknown setting" in problems["tools.x"]
    assert loaded.config.env_deny == denied


def test_what_a_model_takes_comes_from_its_models_entry_then_its_provider_then_the_default(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        'models = ["openai:gpt-4o", { model = "openai:llama3", input = ["text"] },'
        ' { model = "openai:gpt-audio", input = ["text", "image", "audio"] }]\n'
        '[providers.anthropic]\ninput = ["text"]\n',
    )
    loaded = load(["--model", "echo"], env={**NO_KEYS, "ACP_SERVER_CONFIG": str(path)})
    assert loaded.file.problems == ()
    config = loaded.config
    assert config.models == ("openai:gpt-4o", "openai:llama3", "openai:gpt-audio")
    assert config.accepts("openai:gpt-4o") == {"text", "image"}  # the OpenAI-compatible default
    assert config.accepts("openai:llama3") == {"text"}
    assert config.accepts("openai:gpt-audio") == {"text", "image", "audio"}
    assert config.accepts("anthropic:claude-x") == {"text"}  # [providers.anthropic] input
    assert Config().accepts("anthropic:claude-x") == {"text", "image"}
    assert Config().accepts("echo") == {"text"}
    assert Config().accepts("scripted:turns.json") == {"text", "image", "audio"}


@pytest.mark.parametrize(
    ("text", "key", "message"),
    [
        ('models = [{ model = "openai:x", input = ["text", "video"] }]', "models", "unknown kind 'video'"),
        ('models = [{ model = "anthropic:x", input = ["audio"] }]', "models", "takes no audio"),
        ('models = [{ model = "openai:x", inputs = ["text"] }]', "models", "unknown key 'inputs'"),
        ('models = [{ input = ["text"] }]', "models", "expected model specs, or tables"),
        ('[providers.openai]\ninput = "image"', "providers.openai.input", "expected a list"),
    ],
)
def test_a_wrong_input_setting_is_reported_naming_what_is_wrong(
    tmp_path: Path, text: str, key: str, message: str
) -> None:
    loaded = load([], env={**NO_KEYS, "ACP_SERVER_CONFIG": str(write(tmp_path, text + "\n"))})
    problems = {p.key: p.message for p in loaded.file.problems}
    assert message in problems[key]
    assert loaded.config.model_input == () and loaded.config.family_input == ()


# --- problems, in plain words ---


def test_problems_name_the_file_the_key_and_what_was_expected(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        'permision_mode = "bypass"\n'
        "max_turn_requests = 0\n"
        'cleanup_deadline = "soon"\n'
        "lease_ttl = 0.5\n"
        "store = 1\n"
        'model = "gpt-4o"\n'
        "test_mode = true\n"
        "[providers.openai]\napi_key = 12345678901\nbase = 1\n"
        "[providers.mistral]\napi_key = 'x'\n",
    )
    settings = load_settings(path)
    by_key = {p.key: p for p in settings.problems}
    assert by_key["permision_mode"].severity == "warning"
    assert "did you mean 'permission_mode'" in by_key["permision_mode"].message
    assert "whole number of at least 1, found 0" in by_key["max_turn_requests"].message
    assert "number of seconds" in by_key["cleanup_deadline"].message
    assert "seconds from 1 to 3600, found 0.5" in by_key["lease_ttl"].message
    assert "expected true or false" in by_key["store"].message and "memory only" in by_key["store"].message
    assert "openai:MODEL" in by_key["model"].message
    assert "--test-mode" in by_key["test_mode"].message
    assert "expected text, found a whole number" in by_key["providers.openai.api_key"].message
    assert "12345678901" not in str(by_key["providers.openai.api_key"])  # a value that may be a key is never echoed
    assert by_key["providers.openai.base"].severity == "warning"
    assert "unknown provider" in by_key["providers.mistral"].message
    assert all(str(p).startswith(f"{path}: {p.key}: ") for p in settings.problems)
    # What passed is kept; what failed is gone (and `store` falls back to the private choice).
    assert settings.values == {"store": False}


def test_an_unreadable_file_is_ignored_whole_and_fails_closed(tmp_path: Path) -> None:
    path = write(tmp_path, 'permission_mode = "read_only"\n[providers.openai\n')
    loaded = load([], env={"ACP_SERVER_CONFIG": str(path)})
    (problem,) = loaded.file.problems
    assert str(path) in str(problem) and "not valid TOML" in problem.message and "line 2" in problem.message
    assert (loaded.config.store, loaded.config.log_to_file) == (False, False)
    assert loaded.config.permission_mode == "default"
    # Flags and the environment still decide what they decide.
    env = {"ACP_SERVER_CONFIG": str(path), "ACP_SERVER_NO_STORE": "0"}
    assert load(["--log-file", str(tmp_path / "x.log")], env=env).config.store is True


def test_a_missing_config_file_is_no_problem_and_creates_nothing(tmp_path: Path) -> None:
    """What it costs a start-up is measured by `bench/startup.py`; here: it is not an error and touches nothing."""
    missing = tmp_path / "missing" / "config.toml"
    for _ in range(2):  # a second start-up finds it as missing as the first
        loaded = load([], env={"ACP_SERVER_CONFIG": str(missing)})
        assert loaded.file.problems == ()
        assert loaded.file == load_settings(missing)
        assert not loaded.file.found and loaded.file.readable and not loaded.file.values
    assert not missing.parent.exists()
    assert list(tmp_path.iterdir()) == []


# --- end to end: the server reads the file ---


async def test_the_server_starts_sessions_with_the_files_settings_and_the_environment_wins(
    start_server: StartServer, tmp_path: Path
) -> None:
    path = write(tmp_path, 'permission_mode = "read_only"\nprompt_policy = "queue"\nmodel = "echo"\n')
    # No --model flag (the harness's default arguments carry one): the file's model must be the one used.
    server = await start_server("--cleanup-deadline", "0.5", env={**NO_KEYS, "ACP_SERVER_CONFIG": str(path)})
    await server.initialize()
    created = (await server.call("session/new", {"cwd": str(tmp_path), "mcpServers": []}))["result"]
    assert created["modes"]["currentModeId"] == "read_only"
    assert option(created["configOptions"], "prompt_policy")["currentValue"] == "queue"
    prompt = {"sessionId": created["sessionId"], "prompt": [{"type": "text", "text": "from the file"}]}
    assert (await server.call("session/prompt", prompt))["result"] == {"stopReason": "end_turn"}
    assert "".join(server.texts(created["sessionId"])) == "from the file"  # the file's model: echo

    env = {**NO_KEYS, "ACP_SERVER_CONFIG": str(path), "ACP_SERVER_PERMISSION_MODE": "accept_edits"}
    overridden = await start_server("--prompt-policy", "reject", env=env)
    await overridden.initialize()
    created = (await overridden.call("session/new", {"cwd": str(tmp_path), "mcpServers": []}))["result"]
    assert created["modes"]["currentModeId"] == "accept_edits"
    assert option(created["configOptions"], "prompt_policy")["currentValue"] == "reject"


async def test_a_bad_value_is_reported_and_the_server_starts_with_the_default(
    start_server: StartServer, tmp_path: Path
) -> None:
    path = write(tmp_path, 'permission_mode = "yolo"\nmodle = "echo"\n')
    server = await start_server("--model", "echo", env={**NO_KEYS, "ACP_SERVER_CONFIG": str(path)})
    await server.initialize()
    created = (await server.call("session/new", {"cwd": str(tmp_path), "mcpServers": []}))["result"]
    assert created["modes"]["currentModeId"] == "default"
    await server.close()
    assert f"{path}: permission_mode: expected one of default, accept_edits, bypass, read_only" in server.stderr_text
    assert "modle: unknown setting, ignored (did you mean 'model'?)" in server.stderr_text


def test_a_prompt_policy_counts_as_chosen_only_when_a_flag_variable_or_file_sets_it(tmp_path: Path) -> None:
    """Unchosen, a v2 connection queues busy prompts (ACP-V2.md §23 Q4); chosen anywhere, the choice holds."""
    missing = {"ACP_SERVER_CONFIG": str(tmp_path / "none.toml")}
    assert not load([], env=missing).config.prompt_policy_chosen
    assert load(["--prompt-policy", "interrupt"], env=missing).config.prompt_policy_chosen
    assert load([], env={**missing, "ACP_SERVER_PROMPT_POLICY": "reject"}).config.prompt_policy_chosen
    path = write(tmp_path, 'prompt_policy = "interrupt"\n')
    assert load([], env={"ACP_SERVER_CONFIG": str(path)}).config.prompt_policy_chosen


@pytest.mark.parametrize("line", ["keep_sessions = -1", "keep_sessions = 2.5", 'keep_sessions_days = "a month"'])
def test_a_bad_retention_value_in_the_file_is_reported_and_the_default_keeps(tmp_path: Path, line: str) -> None:
    path = write(tmp_path, line + "\n")
    loaded = load([], env={"ACP_SERVER_CONFIG": str(path)})
    assert (loaded.config.keep_sessions, loaded.config.keep_sessions_days) == (500, 90.0)
    (problem,) = loaded.file.problems
    assert problem.key == line.split(maxsplit=1)[0] and "zero or more" in problem.message


@pytest.mark.parametrize("default_model", ["openai:qwen", "anthropic:claude-x"])
def test_the_base_url_flag_and_the_top_level_base_url_set_the_default_models_provider_only(
    tmp_path: Path, default_model: str
) -> None:
    # Issue 20 item 1: with `--model openai:qwen --base-url URL`, Anthropic's listing went to URL with its key.
    document = read_config_file(
        write(tmp_path, 'base_url = "http://top.example/v1"\n[providers.anthropic]\napi_key = "sk-ant-0123456789"\n')
    )
    flag = "http://flag.example/v1"
    ours, other = ("openai", "anthropic") if default_model.startswith("openai") else ("anthropic", "openai")
    assert provider_credentials(ours, document, {}, flag, default_model).base_url == flag
    assert provider_credentials(ours, document, {}, None, default_model).base_url == "http://top.example/v1"
    # The other provider keeps its own endpoint (None: its SDK's default), whatever the flag and the file's top say.
    assert provider_credentials(other, document, {}, flag, default_model).base_url is None
    own = {"OPENAI_BASE_URL": "http://own-openai/v1", "ANTHROPIC_BASE_URL": "http://own-anthropic"}
    expected = "http://own-openai/v1" if other == "openai" else "http://own-anthropic"
    assert provider_credentials(other, document, own, flag, default_model).base_url == expected
    # An offline default model takes no endpoint: the flag sets none.
    for family in ("openai", "anthropic"):
        assert provider_credentials(family, document, {}, flag, "echo").base_url is None
