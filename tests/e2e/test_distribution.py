"""Distribution: the ACP registry manifest (`agent.json`) agrees with the package, the README's editor set-ups name
flags this server takes and start it, and the built wheel installs and runs through `uvx` and `pipx` (initialize
answered)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import orjson
import pytest

from acp_server import __version__
from acp_server.settings.command_line import load
from tests.support.harness import isolated_env, scaled, server_command

REPO = Path(__file__).resolve().parents[2]
INITIALIZE = b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1,"clientCapabilities":{}}}\n'
# The fields of an agent manifest (ACP Agent Registry RFD), the required ones first.
REQUIRED = ("id", "name", "version", "description", "distribution")
OPTIONAL = ("repository", "website", "authors", "license", "license_url", "icon")


def package_version() -> str:
    version: str = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    return version


def test_the_registry_manifest_names_the_packages_version_and_runs_it_with_uvx() -> None:
    manifest: dict[str, Any] = orjson.loads((REPO / "agent.json").read_bytes())
    assert set(REQUIRED) <= set(manifest) <= {*REQUIRED, *OPTIONAL}
    assert re.fullmatch(r"[a-z][a-z0-9-]*", manifest["id"])
    assert all(isinstance(manifest[key], str) and manifest[key] for key in ("name", "description"))
    assert manifest["version"] == package_version() == __version__
    distribution = manifest["distribution"]
    assert set(distribution) == {"uvx"}
    uvx = distribution["uvx"]
    assert set(uvx) <= {"package", "args", "env"}
    assert uvx["package"] == f"acp-server=={__version__}"  # the package's own name is its command's
    assert all(isinstance(arg, str) for arg in uvx.get("args", []))


def editor_commands() -> list[tuple[str, list[str]]]:
    """Every agent the README's editor set-ups define: (the editor's command, its args)."""
    readme = (REPO / "README.md").read_text()
    section = readme.split("## Editor set-up", 1)[1].split("\n## ", 1)[0]
    found: list[tuple[str, list[str]]] = []
    for block in re.findall(r"```json\n(.*?)```", section, re.S):
        settings = orjson.loads(block)
        for key in ("agent_servers", "acp.agents"):
            for entry in settings.get(key, {}).values():
                found.append((entry["command"], list(entry.get("args", []))))
    for block in re.findall(r"```lua\n(.*?)```", section, re.S):
        for listed in re.findall(r'acp_server\("\w+", \{([^}]*)\}\)', block):
            found.append(("acp-server", re.findall(r'"([^"]*)"', listed)))
    return found


def server_args(command: str, args: list[str]) -> list[str]:
    if Path(command).name == "uvx":
        assert args[0] == "--from" and args[1].endswith(".whl") and args[2] == "acp-server", args
        assert f"acp_server-{__version__}-" in args[1] or "VERSION" in args[1]
        return args[3:]
    assert Path(command).name == "acp-server", command
    return args


def test_the_readme_editor_set_ups_use_flags_this_server_takes_and_start_it(tmp_path: Path) -> None:
    commands = editor_commands()
    editors = (REPO / "README.md").read_text().split("## Editor set-up", 1)[1]
    for name in ("**Zed**", "**JetBrains IDEs**", "**VS Code**", "**Neovim**"):
        assert name in editors
    assert len(commands) >= 7 and any(Path(c).name == "uvx" for c, _ in commands)
    distinct = {tuple(server_args(command, args)) for command, args in commands}
    for args in sorted(distinct):
        load(list(args), env={"ACP_SERVER_CONFIG": str(tmp_path / "absent.toml")})  # a bad flag exits here
        result = subprocess.run(
            server_command(*args),
            input=INITIALIZE,
            capture_output=True,
            env={**os.environ, **isolated_env(), "ANTHROPIC_API_KEY": "", "OPENAI_API_KEY": ""},
            timeout=scaled(30),
            check=False,
        )
        assert result.returncode == 0, (args, result.stderr)
        assert orjson.loads(result.stdout.splitlines()[0])["result"]["agentInfo"]["version"] == __version__


UV = shutil.which("uv", path=str(Path(sys.executable).parent)) or shutil.which("uv")


@pytest.mark.skipif(UV is None, reason="uv is not installed (the test extra installs it)")
@pytest.mark.timeout(300)
def test_the_built_wheel_runs_through_uvx_and_pipx_and_answers_initialize(tmp_path: Path) -> None:
    assert UV is not None
    source = tmp_path / "source"  # a copy, so the build leaves the checkout as it was
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, source / name)
    shutil.copytree(REPO / "acp_server", source / "acp_server", ignore=shutil.ignore_patterns("__pycache__"))
    dist = tmp_path / "dist"
    built = subprocess.run(
        [UV, "build", "--wheel", "--out-dir", str(dist), str(source)],
        capture_output=True,
        text=True,
        timeout=scaled(120),
        check=False,
    )
    assert built.returncode == 0, built.stderr
    (wheel,) = dist.glob("acp_server-*.whl")
    assert wheel.name == f"acp_server-{__version__}-py3-none-any.whl"
    uvx = [UV, "tool", "run", "--from", str(wheel), "acp-server"]  # what `uvx --from WHEEL acp-server` runs
    env = {**os.environ, **isolated_env()}
    _answers_version_and_initialize(uvx, env)
    # pipx, the other way people install a Python command: its own venv under PIPX_HOME, the command in PIPX_BIN_DIR.
    pipx_env = {
        **env,
        "PIPX_HOME": str(tmp_path / "pipx"),
        "PIPX_BIN_DIR": str(tmp_path / "pipx-bin"),
        "PIPX_MAN_DIR": str(tmp_path / "pipx-man"),
    }
    installed = subprocess.run(
        [sys.executable, "-m", "pipx", "install", str(wheel)],
        capture_output=True,
        text=True,
        env=pipx_env,
        timeout=scaled(180),
        check=False,
    )
    assert installed.returncode == 0, installed.stderr
    _answers_version_and_initialize([str(tmp_path / "pipx-bin" / "acp-server")], pipx_env)


def _answers_version_and_initialize(command: list[str], env: dict[str, str]) -> None:
    """The installed command prints the package's version and answers `initialize` with one line on stdout."""
    version = subprocess.run(
        [*command, "--version"], capture_output=True, text=True, env=env, timeout=scaled(120), check=False
    )
    assert version.returncode == 0, version.stderr
    assert version.stdout.strip() == f"acp-server {__version__}"
    served = subprocess.run(
        [*command, "--model", "scripted"],
        input=INITIALIZE,
        capture_output=True,
        env=env,
        timeout=scaled(60),
        check=False,
    )
    assert served.returncode == 0, served.stderr
    (line,) = served.stdout.splitlines()
    answer = orjson.loads(line)
    info = answer["result"]["agentInfo"]
    assert answer["id"] == 1 and (info["name"], info["version"]) == ("acp-server", __version__)
