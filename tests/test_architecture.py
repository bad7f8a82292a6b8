"""Guards on the architecture (ARCHITECTURE.md): layers, where asyncio and jsonrpcserver may appear, stdout hygiene,
module docstrings, and a start-up that imports nothing heavy. Checked with `ast`, so a violation fails fast."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "acp_server"

# Module -> layer. A module imports only from its own layer or lower.
LAYERS: dict[str, int] = {
    "acp_server": 0,
    "acp_server.config": 0,
    "acp_server.schema": 0,
    "acp_server.runtime": 0,
    "acp_server.runtime.model": 0,
    "acp_server.runtime.ports": 0,
    "acp_server.runtime.paths": 1,
    "acp_server.runtime.beneath": 1,
    "acp_server.runtime.compaction": 1,
    "acp_server.runtime.system_prompt": 1,
    "acp_server.settings": 0,
    "acp_server.config_checks": 0,
    "acp_server.logfile": 1,
    "acp_server.runtime.local_fs": 1,
    "acp_server.runtime.local_commands": 1,
    "acp_server.runtime.providers": 1,
    "acp_server.runtime.providers.echo": 1,
    "acp_server.runtime.providers.scripted": 1,
    "acp_server.runtime.providers.openai": 1,
    "acp_server.runtime.providers.http_common": 1,
    "acp_server.runtime.providers.anthropic": 1,
    "acp_server.runtime.tools": 1,
    "acp_server.runtime.tools.testing": 1,
    "acp_server.runtime.tools.files": 1,
    "acp_server.runtime.tools.gitignore": 1,
    "acp_server.runtime.tools.plan": 1,
    "acp_server.runtime.tools.commands": 1,
    "acp_server.runtime.tools.delegate": 1,
    "acp_server.runtime.processes": 1,
    "acp_server.runtime.loop": 1,
    "acp_server.runtime.text_guard": 1,
    "acp_server.runtime.child_env": 1,
    "acp_server.transport": 1,
    "acp_server.mcp_bridge": 1,
    "acp_server.mcp_bridge.specs": 1,
    "acp_server.mcp_bridge.transports": 1,
    "acp_server.mcp_bridge.link": 1,
    "acp_server.mcp_bridge.tools": 1,
    "acp_server.mcp_bridge.hub": 1,
    "acp_server.mcp_bridge.registry": 1,
    "acp_server.mcp_bridge.probe": 1,
    "acp_server.rpc": 1,
    "acp_server.connection": 2,
    "acp_server.agent": 2,
    "acp_server.store": 2,
    "acp_server.store.records": 2,
    "acp_server.store.replay": 2,
    "acp_server.store.leases": 2,
    "acp_server.store.turn_log": 2,
    "acp_server.store.sqlite_file": 2,
    "acp_server.store.worker": 2,
    "acp_server.store.store": 2,
    "acp_server.editor": 3,
    "acp_server.session_options": 3,
    "acp_server.slash_commands": 3,
    "acp_server.prompt_turn": 3,
    "acp_server.turn_tools": 3,
    "acp_server.subagents": 3,
    "acp_server.turn_updates": 3,
    "acp_server.dispatcher": 3,
    "acp_server.session_handlers": 3,
    "acp_server.handlers": 3,
    "acp_server.server": 4,
    "acp_server.cli": 4,
    "acp_server.transcripts": 0,
    "acp_server.transcripts.format": 0,
    "acp_server.transcripts.ids": 0,
    "acp_server.transcripts.normalise": 0,
    "acp_server.transcripts.secrets": 0,
    "acp_server.transcripts.record": 1,
    "acp_server.transcripts.engine": 1,
    "acp_server.transcripts.agent_process": 1,
    "acp_server.transcripts.replay": 4,
    "acp_server.transcripts.testing": 4,
    "acp_server.doctor": 4,
    "acp_server.chat": 4,
    "acp_server.chat.app": 4,
    "acp_server.chat.options": 4,
    "acp_server.chat.agent_process": 4,
    "acp_server.chat.rpc_client": 4,
    "acp_server.chat.terminal": 4,
    "acp_server.chat.style": 4,
    "acp_server.chat.render": 4,
    "acp_server.chat.permissions": 4,
    "acp_server.chat.session": 4,
    "acp_server.__main__": 4,
}


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> list[tuple[str, ast.Module]]:
    return [(module_name(path), ast.parse(path.read_text())) for path in sorted(PACKAGE.rglob("*.py"))]


def imported(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def test_every_module_is_placed_in_a_layer() -> None:
    unplaced = sorted(name for name, _ in modules() if name not in LAYERS)
    assert not unplaced


def test_modules_import_only_from_their_own_layer_or_lower() -> None:
    violations = [
        f"{name} (layer {LAYERS[name]}) imports {target} (layer {LAYERS[target]})"
        for name, tree in modules()
        for target in imported(tree)
        if target in LAYERS and LAYERS[target] > LAYERS[name]
    ]
    assert not violations, "\n".join(violations)


def test_the_runtime_knows_nothing_of_json_rpc_or_acp_wire_layers() -> None:
    for name, tree in modules():
        if name.startswith("acp_server.runtime"):
            foreign = {
                t
                for t in imported(tree)
                if t.startswith("acp_server.")
                and not t.startswith("acp_server.runtime")
                and t not in ("acp_server.config", "acp_server.settings")  # configuration, not the wire
            }
            assert not foreign, f"{name} imports {foreign}"


def test_asyncio_appears_only_in_transport_and_rpc_and_jsonrpcserver_only_in_rpc() -> None:
    for name, tree in modules():
        names = imported(tree)
        if name not in ("acp_server.transport", "acp_server.rpc"):
            assert not any(n == "asyncio" or n.startswith("asyncio.") for n in names), name
        if name != "acp_server.rpc":
            assert not any(n.startswith("jsonrpcserver") or n.startswith("oslash") for n in names), name


def test_nothing_writes_to_stdout_outside_the_transport() -> None:
    for name, tree in modules():
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "print":
                pytest.fail(f"{name} calls print()")
            touches_sys_stdout = (
                isinstance(node, ast.Attribute)
                and node.attr == "stdout"
                and isinstance(node.value, ast.Name)
                and node.value.id == "sys"
            )
            # The chat client is another program: its stdout is a person's terminal, and the protocol runs over
            # its agent's pipes. Its terminal module is the one place it writes there.
            if touches_sys_stdout and name not in ("acp_server.transport", "acp_server.chat.terminal"):
                pytest.fail(f"{name} touches sys.stdout")


def test_the_chat_client_talks_to_the_agent_only_over_the_protocol() -> None:
    allowed = ("acp_server", "acp_server.schema")  # the package's version and the wire's own models
    for name, tree in modules():
        if name.startswith("acp_server.chat"):
            foreign = {
                t
                for t in imported(tree)
                if t.startswith("acp_server") and not t.startswith("acp_server.chat") and t not in allowed
            }
            assert not foreign, f"{name} imports {foreign}"


def test_every_module_says_why_it_exists() -> None:
    missing = [name for name, tree in modules() if not ast.get_docstring(tree)]
    assert not missing


def test_no_module_globals_hold_mutable_run_state() -> None:
    """Module globals are constants; per-turn state lives on the RunContext (the seed RFC's bug)."""
    allowed_mutable = {("acp_server.agent", "_run_ids")}  # an id counter, not run state
    for name, tree in modules():
        for node in tree.body:
            if isinstance(node, (ast.Assign, ast.AnnAssign)):
                value = node.value
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    if not isinstance(target, ast.Name) or (name, target.id) in allowed_mutable:
                        continue
                    if target.id.startswith("__"):
                        continue  # __all__
                    if isinstance(value, (ast.List, ast.Set)) or (
                        isinstance(value, ast.Dict) and not target.id.isupper()
                    ):
                        pytest.fail(f"{name}.{target.id} is a mutable module global")


@pytest.mark.timeout(60)
def test_starting_the_server_imports_nothing_heavy() -> None:
    code = (
        "import sys, acp_server.server, acp_server.cli;"
        "heavy = [m for m in ('openai', 'anthropic', 'mcp', 'acp', 'httpx', 'jsonschema_path') if m in sys.modules];"
        "print(','.join(heavy))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == ""
