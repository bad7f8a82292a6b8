"""`acp-server doctor`: the real command, run as a subprocess against a real loopback endpoint, real files and real
MCP servers. It must say what is wrong in plain words, never print a key, and exit 1 exactly when a check FAILs."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import orjson
import pytest

from tests.support.fake_openai import FakeOpenAI, Received, ServerReply, _Handler, error
from tests.support.harness import isolated_env, scaled, server_command

KEY = "sk-doctor-Qm3Zt8kLp4RwN7yH"
NO_KEYS = {"OPENAI_API_KEY": "", "OPENAI_BASE_URL": "", "ANTHROPIC_API_KEY": "", "ANTHROPIC_AUTH_TOKEN": ""}
MCP_SERVER = Path(__file__).resolve().parents[1] / "support" / "mcp_servers" / "stdio_server.py"


class _ModelsHandler(_Handler):
    """The fake's handler plus `GET /models`, answered from the same scripted queue (the reply's body as JSON)."""

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        state = self.server.state
        with state.lock:
            headers = {k.lower(): v for k, v in self.headers.items()}
            state.requests.append(Received(self.path, headers, {}, int(self.client_address[1])))
            state.arrived.notify_all()
            reply = state.queue.popleft() if state.queue else state.default
        self._send_error(reply or error(400, "fake server: no scripted reply left for this request"))


class FakeModelsEndpoint(FakeOpenAI):
    def __init__(self) -> None:
        super().__init__()
        self._server.RequestHandlerClass = _ModelsHandler


def models(*names: str) -> ServerReply:
    return ServerReply(status=200, body={"object": "list", "data": [{"id": n, "object": "model"} for n in names]})


@pytest.fixture
def endpoint() -> Iterator[FakeModelsEndpoint]:
    with FakeModelsEndpoint() as server:
        yield server


@dataclass
class Report:
    code: int
    text: str

    def line(self, start: str) -> str:
        found = [line for line in self.text.splitlines() if line.startswith(start)]
        assert len(found) == 1, f"no single line starting {start!r} in:\n{self.text}"
        return found[0]


def doctor(
    *args: str, env: dict[str, str] | None = None, config: Path | None = None, timeout: float = scaled(3)
) -> Report:
    """`acp-server doctor` with `--timeout` (its wait for each endpoint and MCP server) a scaled safety bound."""
    full_env = {**os.environ, **isolated_env(), **NO_KEYS, **(env or {})}
    if config is not None:
        full_env["ACP_SERVER_CONFIG"] = str(config)
    result = subprocess.run(
        server_command("doctor", "--timeout", f"{timeout:g}", *args),
        env=full_env,
        capture_output=True,
        text=True,
        timeout=scaled(60),
        check=False,
    )
    assert result.stdout == "", "stdout belongs to the protocol, even in a subcommand"
    return Report(result.returncode, result.stderr)


def test_a_reachable_endpoint_that_lists_the_model_passes_and_the_key_is_never_printed(
    endpoint: FakeModelsEndpoint,
) -> None:
    endpoint.script(models("other", "fake-model"))
    report = doctor("--model", "openai:fake-model", "--base-url", endpoint.base_url, env={"OPENAI_API_KEY": KEY})
    assert report.code == 0, report.text
    assert "found in environment variable OPENAI_API_KEY" in report.line("OK   openai API key")
    assert "lists fake-model" in report.line("OK   openai endpoint")
    assert KEY not in report.text
    (request,) = endpoint.requests
    assert request.path == "/v1/models" and request.headers["authorization"] == f"Bearer {KEY}"


def test_a_model_the_endpoint_does_not_list_is_a_warning(endpoint: FakeModelsEndpoint) -> None:
    endpoint.script(models("llama3:latest", "qwen2.5-coder:latest"))
    report = doctor("--model", "openai:qwen2.5-coder", "--base-url", endpoint.base_url)
    assert report.code == 0, report.text
    assert "none needed for the local endpoint" in report.line("OK   openai API key")
    assert "lists qwen2.5-coder" in report.line("OK   openai endpoint")  # Ollama's ":latest" counts
    endpoint.script(models("llama3:latest"))
    report = doctor("--model", "openai:mistral", "--base-url", endpoint.base_url)
    assert report.code == 0
    assert "mistral is not among the 1 models it lists (llama3:latest)" in report.line("WARN openai endpoint")


def test_an_endpoint_that_refuses_the_key_fails(endpoint: FakeModelsEndpoint) -> None:
    endpoint.script(error(401, "Incorrect API key provided"))
    report = doctor("--model", "openai:fake-model", "--base-url", endpoint.base_url, env={"OPENAI_API_KEY": KEY})
    assert report.code == 1
    assert "refused the key (HTTP 401)" in report.line("FAIL openai endpoint")
    assert "1 check(s) failed" in report.text and KEY not in report.text


def test_an_unreachable_endpoint_fails_saying_why() -> None:
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    report = doctor("--model", "openai:m", "--base-url", f"http://127.0.0.1:{port}/v1")
    assert report.code == 1
    assert "connection refused (nothing is listening there" in report.line("FAIL openai endpoint")
    with socket.socket() as silent:  # accepts connections (the backlog) and never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        url = f"http://127.0.0.1:{silent.getsockname()[1]}/v1"
        report = doctor("--model", "openai:m", "--base-url", url, "--timeout", "0.5")
    assert report.code == 1
    assert "no answer within 0.5 s" in report.line("FAIL openai endpoint")


def test_a_missing_key_fails_and_says_where_to_put_one(endpoint: FakeModelsEndpoint, tmp_path: Path) -> None:
    endpoint.script(error(401, "x-api-key header is required", kind="authentication_error"))
    config = tmp_path / "config.toml"
    env = {"ANTHROPIC_BASE_URL": f"http://127.0.0.1:{endpoint.port}"}  # Anthropic's base has no /v1
    report = doctor("--model", "anthropic:claude-test", env=env, config=config)
    assert report.code == 1
    words = report.line("FAIL anthropic API key")
    assert "set ANTHROPIC_API_KEY" in words and "[providers.anthropic]" in words and str(config) in words
    assert "wants an API key (HTTP 401) and none was found" in report.line("FAIL anthropic endpoint")
    assert endpoint.requests[0].path == "/v1/models"


def _temp_dir_holds_the_code() -> bool:
    from acp_server.runtime import sandbox as sandbox_module
    from acp_server.runtime.sandbox import landlock_support

    support = landlock_support()
    exposed = [path for path in sandbox_module._temp_dirs() if sandbox_module._exposed(path, support.package_dir)]
    return support.abi >= 1 and bool(exposed)


def test_a_key_in_a_file_others_can_read_is_a_warning(endpoint: FakeModelsEndpoint, tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text(f'[providers.openai]\napi_key = "{KEY}"\nbase_url = "{endpoint.base_url}"\n')
    config.chmod(0o644)
    endpoint.set_default(models("m"))
    report = doctor("--model", "openai:m", config=config)
    assert report.code == 0, report.text
    assert "the config file (api_key)" in report.line("OK   openai API key")
    assert f"chmod 600 {config}" in report.line("WARN config file")
    assert endpoint.requests[0].headers["authorization"] == f"Bearer {KEY}"
    config.chmod(0o600)
    warnings = [line.split(":")[0] for line in doctor("--model", "openai:m", config=config).text.splitlines()]
    # No warning left, but the sandbox's own where the temp directory holds this checkout (a CI clone in /tmp).
    assert [w for w in warnings if w.startswith("WARN")] == (["WARN sandbox"] if _temp_dir_holds_the_code() else [])
    assert KEY not in report.text


def test_a_broken_config_file_fails_with_its_path_and_what_is_wrong(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text('model = "echo"\n[providers.openai\n')
    report = doctor(config=config)
    assert report.code == 1
    words = report.line("FAIL config file:")
    assert f"{config}: the file is not valid TOML" in words and "(at line 2, column 18)" in words
    assert "sessions are kept in memory only" in words
    config.write_text('max_turn_requests = "many"\nmodel = "echo"\nthinking = true\n')
    report = doctor(config=config)
    assert report.code == 1
    words = report.line("FAIL config max_turn_requests")
    assert "expected a whole number of at least 1, found text" in words
    assert "unknown setting" in report.line("WARN config thinking")


def test_unusable_directories_are_reported(tmp_path: Path) -> None:
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("")
    report = doctor("--state-dir", str(not_a_dir), "--log-file", str(not_a_dir / "acp.log"))
    assert report.code == 1
    assert f"{not_a_dir} is not a directory" in report.line("FAIL state directory")
    assert "stderr only" in report.line("WARN log file")
    report = doctor("--no-store", "--no-log-file")
    assert report.code == 0
    assert "memory only" in report.line("OK   state directory") and "off" in report.line("OK   log file")


def test_mcp_servers_from_the_config_file_are_started_and_asked_for_their_tools(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text(
        f"[mcp_servers.tools]\ncommand = {orjson.dumps(sys.executable).decode()}\n"
        f"args = [{orjson.dumps(str(MCP_SERVER)).decode()}, 'doctor-test']\n"
        '[mcp_servers.missing]\ncommand = "/nonexistent/mcp-server"\n'
    )
    # Starting a Python MCP server (it imports the SDK) takes seconds on a loaded machine: the doctor is given the
    # MCP tests' own bound, so only a server that cannot start fails.
    report = doctor(config=config, timeout=scaled(20))
    assert report.code == 1, report.text
    assert "started;" in report.line("OK   MCP server tools") and "echo" in report.line("OK   MCP server tools")
    assert "/nonexistent/mcp-server" in report.line("FAIL MCP server missing")


def test_the_sandbox_line_says_whether_commands_are_confined_and_how() -> None:
    from acp_server.runtime import sandbox as sandbox_module
    from acp_server.runtime.sandbox import landlock_support

    support = landlock_support()
    default = doctor()
    # A checkout or venv under the temp directory (a CI clone in /tmp): that directory is never writable, and said.
    held = [path for path in sandbox_module._temp_dirs() if sandbox_module._exposed(path, support.package_dir)]
    if support.abi >= 1:
        line = default.line("WARN sandbox" if held else "OK   sandbox")
        assert f"workspace-write through Landlock ABI {support.abi}" in line
        assert "write only in the session's directories and the temp directory; network allowed" in line
        for path in held:
            assert f"the temp directory {path} NOT writable: it holds or lies inside" in line
        closed = doctor("--sandbox", "read-only", "--no-sandbox-network")
        if support.abi >= 9:
            assert "network off" in closed.line("OK   sandbox")
        else:  # Unix sockets by path stay reachable: half of "no network", named
            line = closed.line("WARN sandbox")
            assert "network off" in line and "Unix sockets by path NOT restricted" in line and "D-Bus" in line
    else:
        assert "not possible here" in default.line("WARN sandbox")
    assert doctor("--sandbox", "off").line("WARN sandbox") == (
        "WARN sandbox: off: local commands run with your full rights"
    )


def test_where_no_sandbox_is_possible_doctor_says_so_and_why(tmp_path: Path) -> None:
    shadow = tmp_path / "shadow"
    (shadow / "landlockpy").mkdir(parents=True)
    (shadow / "landlockpy" / "__init__.py").write_text('raise ImportError("landlockpy is not installed here")\n')
    report = doctor(env={"PYTHONPATH": str(shadow)})
    assert report.code == 0, report.text  # a warning: the server still works, as before
    line = report.line("WARN sandbox")
    assert "not possible here: the landlockpy package cannot be imported" in line
    assert "local commands run with your full rights" in line
    named = doctor("--sandbox", "read-only", env={"PYTHONPATH": str(shadow)})  # asked for: commands are refused
    line = named.line("FAIL sandbox")
    assert "the read-only sandbox was asked for but cannot be had: the landlockpy package cannot be imported" in line
    assert "no command is run" in line


def test_a_writable_directory_holding_the_servers_interpreter_is_named_as_not_writable() -> None:
    from acp_server.runtime.sandbox import landlock_support

    if landlock_support().abi < 1:
        pytest.skip("no Landlock on this machine")
    interpreter_dir = str(Path(sys.executable).parent)
    line = doctor("--sandbox-writable", interpreter_dir).line("WARN sandbox")
    assert f"{interpreter_dir} NOT writable: it holds or lies inside" in line
    assert f"the interpreter ({interpreter_dir}/python" in line


def test_model_discovery_reports_what_the_endpoint_adds_and_warms_the_cache(
    endpoint: FakeModelsEndpoint, tmp_path: Path
) -> None:
    state = tmp_path / "state"
    env = {"OPENAI_API_KEY": KEY, "ACP_SERVER_STATE_DIR": str(state)}
    endpoint.script(models("fake-model", "qwen2.5-coder:7b", "text-embedding-3-small", "gpt-4.1"))
    report = doctor("--model", "openai:fake-model", "--base-url", endpoint.base_url, env=env)
    assert report.code == 0, report.text
    line = report.line("OK   openai model discovery")
    assert "2 model(s) offered besides the configured ones; cached for new sessions" in line  # no embedding model
    cached = orjson.loads((state / "model-lists.json").read_bytes())
    assert [(e["family"], e["endpoint"], e["models"]) for e in cached["endpoints"]] == [
        ("openai", endpoint.base_url, ["fake-model", "qwen2.5-coder:7b", "gpt-4.1"])
    ]
    assert KEY not in (state / "model-lists.json").read_text()

    endpoint.script(error(404, "no such route"))
    report = doctor("--model", "openai:fake-model", "--base-url", endpoint.base_url, env=env)
    assert "only the configured models are offered" in report.line("WARN openai model discovery")

    endpoint.script(models("fake-model", "other"))
    report = doctor("--model", "openai:fake-model", "--base-url", endpoint.base_url, "--no-model-discovery", env=env)
    assert "off (model_discovery)" in report.line("OK   openai model discovery")
