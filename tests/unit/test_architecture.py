"""Guards on the architecture (docs/architecture.md): layers, where asyncio and jsonrpcserver may appear, stdout
hygiene, module docstrings, and a start-up that imports nothing heavy. Checked with `ast`, so a violation fails fast."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import jsonrpcserver
import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "acp_server"

# Each layer folder (and each top-level module) and what it may import besides itself. "" is the package's own
# `__init__` (its version). The folders' `__init__` docstrings say the same in words; docs/architecture.md draws it.
ALLOWED: dict[str, frozenset[str]] = {
    "": frozenset(),
    "errors": frozenset(),  # the one exception tree, below every layer: imported where its errors are raised or caught
    "valid_unicode": frozenset(),  # a leaf both the runtime and the connection use
    "settings": frozenset({"", "errors"}),
    "jsonrpc": frozenset({"settings", "valid_unicode"}),
    "runtime": frozenset({"errors", "settings", "valid_unicode"}),
    "store": frozenset({"errors", "runtime", "settings"}),
    "mcp_bridge": frozenset({"", "errors", "runtime", "settings"}),
    "transcripts": frozenset({"errors", "jsonrpc", "settings"}),
    # What every editor shares: the sessions and the services they draw on. It knows no wire shapes.
    "agent": frozenset({"errors", "runtime", "store", "mcp_bridge", "settings"}),
    "protocol": frozenset({"", "errors", "agent", "runtime", "store", "mcp_bridge", "jsonrpc", "settings"}),
    "chat": frozenset({""}),  # another program: it reaches the agent over the protocol only
    # Remote ACP's transport room: the network endpoint and its security, handing each connection to a handler
    # through the stdio seam (jsonrpc's LineSource/LineSink); it knows no sessions.
    "remote": frozenset({"errors", "jsonrpc", "settings"}),
    # The process's entry points: the command line, the composition roots (stdio's, and `serve`'s, which hands each
    # remote connection to the agent), doctor, `acp-server sessions`.
    "cli": frozenset(
        {
            "",
            "errors",
            "remote",
            "settings",
            "jsonrpc",
            "runtime",
            "transcripts",
            "store",
            "mcp_bridge",
            "agent",
            "protocol",
            "chat",
        }
    ),
    "__main__": frozenset({"cli"}),
}
# The modules that may sit flat in the package, outside every layer folder (the structure issue: at most six).
FLAT_MODULES = {"__init__", "__main__", "valid_unicode"}
# How many layers deep the folder import graph may be: the longest chain of folders (and flat modules) that import
# one another, counting both ends (`__main__` -> cli -> protocol -> agent -> store -> runtime -> settings -> errors).
MAX_LAYER_DEPTH = 8
# No crossing of these rules is tolerated: `agent` reaches neither `protocol` nor `jsonrpc`; it defines the `Edge`
# it needs in agent/sessions/edge.py and protocol/ implements it (issue 11 item 3).


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


def dependencies() -> dict[str, set[str]]:
    """Module -> the package's modules it imports, every way a module can be reached: at the top, inside functions,
    under `TYPE_CHECKING`, `from package import submodule`, and a string naming a module (what `importlib` loads:
    only `cli` does, its subcommands, `test_no_module_is_loaded_by_a_name_in_a_string`)."""
    trees = dict(modules())
    graph: dict[str, set[str]] = {}
    for name, tree in trees.items():
        found: set[str] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module:
                found.add(node.module)
                found.update(f"{node.module}.{alias.name}" for alias in node.names)
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in trees:
                found.add(node.value)
        graph[name] = {target for target in found if target in trees and target != name}
    return graph


def folder(module: str) -> str:
    """The layer a module belongs to: its folder under the package, or its own name at the top ("" for the
    package's `__init__`)."""
    parts = module.split(".")[1:]
    return parts[0] if parts else ""


def crossings() -> set[tuple[str, str]]:
    return {
        (name, target)
        for name, targets in dependencies().items()
        for target in targets
        if folder(target) != folder(name) and folder(target) not in ALLOWED[folder(name)]
    }


def test_every_module_is_in_a_layer_with_rules() -> None:
    unplaced = sorted(name for name, _ in modules() if folder(name) not in ALLOWED)
    assert not unplaced


def test_every_layer_imports_only_what_its_rules_allow() -> None:
    violations = sorted(crossings())
    assert not violations, "\n".join(f"{name} imports {target}" for name, target in violations)


def test_only_the_allowed_modules_sit_flat_in_the_package() -> None:
    flat = {path.stem for path in PACKAGE.glob("*.py")}
    assert flat <= FLAT_MODULES, f"move into a layer folder: {sorted(flat - FLAT_MODULES)}"
    assert len(FLAT_MODULES) <= 6


def layer_depth(graph: dict[str, set[str]]) -> dict[str, int]:
    """Each layer's depth in an acyclic layer graph: 1 for a layer that imports no other, else one more than the
    deepest layer it imports."""
    depth: dict[str, int] = {}

    def visit(layer: str) -> int:
        if layer not in depth:
            depth[layer] = 1 + max((visit(target) for target in graph[layer]), default=0)
        return depth[layer]

    for layer in graph:
        visit(layer)
    return depth


def test_the_layer_depth_finder_counts_both_ends_of_the_longest_chain() -> None:
    assert layer_depth({"a": {"b", "c"}, "b": {"c"}, "c": set(), "d": set()}) == {"a": 3, "b": 2, "c": 1, "d": 1}


def test_the_folder_import_graph_is_at_most_eight_layers_deep() -> None:
    """What the layers import, not what they may: the package's own `__init__` (its version) is left out, as a
    package's face; a cycle between layers would recurse without end and is caught by the cycle test first."""
    graph: dict[str, set[str]] = {}
    for name, targets in dependencies().items():
        if folder(name):
            graph.setdefault(folder(name), set()).update(
                folder(t) for t in targets if folder(t) not in ("", folder(name))
            )
    for targets in list(graph.values()):
        for target in targets:
            graph.setdefault(target, set())
    depth = layer_depth(graph)
    assert max(depth.values()) <= MAX_LAYER_DEPTH, sorted(depth.items(), key=lambda item: -item[1])


# Exceptions defined outside the one tree (acp_server/errors): the wire's own (what a request is answered, what the
# client answered one of ours), and the chat client's (another program).
OWN_EXCEPTIONS = {
    ("acp_server.jsonrpc.rpc", "RpcError"),
    ("acp_server.jsonrpc.connection", "ClientRequestError"),
}


def test_every_error_the_server_names_is_in_the_one_tree() -> None:
    """A new public exception class goes in acp_server/errors, drawn in its docstring's tree; one private to its
    module (a leading underscore: it never leaves it) may stay there."""
    strays = sorted(
        f"{name}.{node.name}"
        for name, tree in modules()
        if folder(name) not in ("errors", "chat")
        for node in ast.walk(tree)
        if isinstance(node, ast.ClassDef)
        and not node.name.startswith("_")
        and (name, node.name) not in OWN_EXCEPTIONS
        and any(isinstance(base, ast.Name) and base.id.endswith(("Error", "Exception")) for base in node.bases)
    )
    assert not strays, "define these in acp_server/errors: " + ", ".join(strays)


def test_the_tree_drawn_in_the_errors_docstring_names_every_class_it_defines() -> None:
    tree = dict(modules())["acp_server.errors"]
    drawn = set((ast.get_docstring(tree) or "").split())
    defined = [node.name for node in tree.body if isinstance(node, ast.ClassDef)]
    assert defined
    assert not [name for name in defined if name not in drawn]


def update_builders() -> set[str]:
    """Modules outside the protocol edge with a dict display keyed "sessionUpdate". Reading one (`.get`, a
    comparison: the chat client, the transcript tools) is not building one."""
    return {
        name
        for name, tree in modules()
        if folder(name) != "protocol"
        and any(
            isinstance(node, ast.Dict)
            and any(isinstance(key, ast.Constant) and key.value == "sessionUpdate" for key in node.keys)
            for node in ast.walk(tree)
        )
    }


def test_only_the_protocol_edge_builds_session_updates() -> None:
    """The core emits typed events and the store keeps its own records; `protocol/` alone renders them for the wire."""
    assert not sorted(update_builders())


TEST_MACHINERY = "acp_server.protocol.testmode"
COMPOSITION_ROOT = "acp_server.cli.server"


def in_test_machinery(module: str) -> bool:
    return module == TEST_MACHINERY or module.startswith(TEST_MACHINERY + ".")


def test_only_the_composition_root_imports_the_test_machinery() -> None:
    """The test-mode plug-in (acp_server/protocol/testmode/) is registered by cli/server.py; the core never imports
    it."""
    importers = sorted(
        name
        for name, targets in dependencies().items()
        if not in_test_machinery(name) and name != COMPOSITION_ROOT and any(map(in_test_machinery, targets))
    )
    assert not importers, "import the test machinery: " + ", ".join(importers)


def test_production_code_paths_carry_no_test_hooks() -> None:
    """Only the composition root asks whether test mode is on (to register the plug-in), and no `_scripted/`
    method is named outside the plug-in: the core behaves the same in either mode."""
    for name, tree in modules():
        if in_test_machinery(name) or name == COMPOSITION_ROOT or folder(name) == "settings":
            continue  # settings: where `test_mode` is read and checked
        docstrings: set[int] = set()
        for node in ast.walk(tree):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
                first = node.body[0]
                if isinstance(first, ast.Expr):
                    docstrings.add(id(first.value))
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr == "test_mode":
                pytest.fail(f"{name} reads test_mode")
            text = node.value if isinstance(node, ast.Constant) and id(node) not in docstrings else None
            if isinstance(text, str) and "_scripted/" in text:
                pytest.fail(f"{name} names {text!r}")


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm, iterative: the groups of modules that reach each other (a cycle), largest first."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work: list[tuple[str, list[str]]] = [(root, sorted(graph[root]))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, pending = work[-1]
            if pending:
                target = pending.pop()
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, sorted(graph[target])))
                elif target in on_stack:
                    low[node] = min(low[node], index[target])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group: list[str] = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    groups.append(sorted(group))
    return sorted(groups, key=len, reverse=True)


def test_the_cycle_finder_finds_a_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert strongly_connected(graph) == [["a", "b", "c"]]


def test_no_import_cycle_anywhere() -> None:
    cycles = strongly_connected(dependencies())
    assert not cycles, "\n".join(" <-> ".join(group) for group in cycles)


# The one module that loads modules by a name in a string: the command line's subcommand table (`SUBCOMMANDS`).
LOADS_BY_NAME = "acp_server.cli"


def loads_by_name(tree: ast.Module) -> list[str]:
    """What in `tree` imports a module named by a value: `importlib.import_module` or `__import__`, called or handed
    on (`to_thread.run_sync(importlib.import_module, name)`), however imported."""
    names = ("import_module", "__import__")
    return [
        ast.unparse(node)
        for node in ast.walk(tree)
        if (isinstance(node, ast.Name) and node.id in names) or (isinstance(node, ast.Attribute) and node.attr in names)
    ]


def test_no_module_is_loaded_by_a_name_in_a_string() -> None:
    """The call graph is read off the imports (issue 22 item 3): where start-up needs an import deferred, it is a
    plain `import` inside the function that first needs it. Only the subcommand table names modules to load, so
    `dependencies()` still finds every edge (the string constants there)."""
    found = {name: calls for name, tree in modules() if name != LOADS_BY_NAME and (calls := loads_by_name(tree))}
    assert not found, found
    assert loads_by_name(dict(modules())[LOADS_BY_NAME]) == ["importlib.import_module"]  # the finder still finds it


def test_the_loads_by_name_finder_finds_each_spelling() -> None:
    code = "import importlib\nimportlib.import_module('a')\n__import__('b')\nfrom importlib import import_module\n"
    code += "import_module('c')\nimportlib.__import__('d')\nrun_sync(importlib.import_module, 'e')\n"
    found = [
        "importlib.import_module",
        "__import__",
        "import_module",
        "importlib.__import__",
        "importlib.import_module",
    ]
    assert loads_by_name(ast.parse(code)) == found


def test_every_module_the_deferred_side_loads_is_an_edge_of_the_import_graph() -> None:
    """The deferred side is loaded by plain imports inside functions (cli/server.py `load_deferred_side`), which the
    import graph counts like any other."""
    graph = dependencies()
    assert {"acp_server.cli.deferred_side", "acp_server.protocol.v2.prompt"} <= graph["acp_server.cli.server"]
    assert "acp_server.protocol.deferred_methods" in graph["acp_server.cli.deferred_side"]
    assert {"acp_server.cli.doctor", "acp_server.transcripts.replay_cli"} <= graph[LOADS_BY_NAME]


def test_the_runtime_knows_nothing_of_json_rpc_or_acp_wire_layers() -> None:
    for name, tree in modules():
        if name.startswith("acp_server.runtime"):
            foreign = {
                t
                for t in imported(tree)
                if t.startswith("acp_server.")
                and not t.startswith("acp_server.runtime")
                # configuration, the Unicode repair the connection shares, and the one exception tree: not the wire
                and t
                not in (
                    "acp_server.settings.config",
                    "acp_server.settings.files",
                    "acp_server.valid_unicode",
                    "acp_server.errors",
                )
            }
            assert not foreign, f"{name} imports {foreign}"


def test_asyncio_appears_only_in_transport_and_rpc_and_jsonrpcserver_only_in_rpc() -> None:
    for name, tree in modules():
        names = imported(tree)
        if name not in ("acp_server.jsonrpc.transport", "acp_server.jsonrpc.rpc"):
            assert not any(n == "asyncio" or n.startswith("asyncio.") for n in names), name
        if name != "acp_server.jsonrpc.rpc":
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
            if touches_sys_stdout and name not in ("acp_server.jsonrpc.transport", "acp_server.chat.terminal"):
                pytest.fail(f"{name} touches sys.stdout")


def test_the_chat_client_talks_to_the_agent_only_over_the_protocol() -> None:
    allowed = ("acp_server", "acp_server.protocol.schema")  # the package's version and the wire's own models
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
    allowed_mutable = {("acp_server.agent.sessions.runs", "_run_ids")}  # an id counter, not run state
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


# Modules the path to the first `initialize` answer must not import: the provider SDKs and their HTTP stack (warmed
# in the background once `initialize` is answered), MCP, the test client, jsonrpcserver with its JSON-schema validator
# and toy HTTP server (the first `initialize` is answered before it is loaded, jsonrpc/rpc.py), the TOML parser and
# the config file's checks (only when a config file exists), the session store (opened on first need), and the
# deferred side: the session handlers, the turn, the tools, the edge to the editor and the sandbox
# (protocol/deferred.py: loaded once `initialize` is answered), and pydantic with the wire models and what its
# plug-in loader imports (`initialize` is read without it, protocol/initialize.py; the method tables name their
# models, protocol/params.py).
HEAVY_AT_START_UP = (
    "openai",
    "anthropic",
    "httpx",
    "httpx2",
    "mcp",
    "acp",
    "jsonrpcserver",
    "oslash",
    "jsonschema",
    "jsonschema_path",
    "referencing",
    "http.server",
    "tomllib",
    "sqlite3",
    "psycopg",
    "psycopg_pool",
    "acp_server.store",
    "acp_server.settings.checks",
    "acp_server.cli.deferred_side",
    "acp_server.protocol.deferred_methods",
    "acp_server.protocol.session_handlers",
    "acp_server.protocol.v2.sessions",
    "acp_server.protocol.v2.prompt",
    "acp_server.protocol.acp_edge",
    "acp_server.agent.sessions.turn",
    "acp_server.agent.sessions.services",
    "acp_server.runtime.loop",
    "acp_server.runtime.tools",
    "acp_server.runtime.sandbox",
    "landlockpy",
    "acp_server.protocol.testmode.mode",
    "pydantic",
    "pydantic_core",
    "annotated_types",
    "importlib.metadata",
    "acp_server.protocol.schema",
    "acp_server.protocol.v2.schema",
    "acp_server.protocol.testmode.gate_params",
    # Remote ACP (`serve` only) and the ASGI server under it, with its HTTP/1.1, HTTP/2 and WebSocket machines.
    "acp_server.remote",
    "hypercorn",
    "h11",
    "h2",
    "wsproto",
)


@pytest.mark.timeout(60)
def test_starting_the_server_imports_nothing_heavy() -> None:
    code = (
        "import sys, acp_server.cli.server, acp_server.cli;"
        f"heavy = [m for m in {HEAVY_AT_START_UP!r} if m in sys.modules];"
        "print(','.join(heavy))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == ""


# A server answering `initialize` (no config file; `ARGS` are its flags), with the modules loaded when it writes the
# answer.
_ANSWER_INITIALIZE = """
import os, sys, anyio
from acp_server.cli.server import serve
from acp_server.settings.command_line import load

async def lines():
    yield INITIALIZE
    await anyio.sleep_forever()

class Sink:
    async def write(self, data):
        print(data.decode().strip())
        print(",".join(m for m in HEAVY if m in sys.modules), flush=True)
        os._exit(0)

config = load(ARGS).config
anyio.run(serve, lines(), Sink(), config, backend="asyncio")
"""


# What an editor sends: its capabilities and its name (Zed's shape); and a v2 client's.
INITIALIZE_V1 = (
    b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1,"clientCapabilities":'
    b'{"fs":{"readTextFile":true,"writeTextFile":true},"terminal":true,"_meta":{"terminal_output":true}},'
    b'"clientInfo":{"name":"zed","title":"Zed","version":"0.200.0"}}}'
)
INITIALIZE_V2 = (
    b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":2,'
    b'"info":{"name":"client","version":"2.0"},"capabilities":{"elicitation":{"form":{}}}}}'
)


# With an offline model nothing of the HTTP providers' model lists is needed either (it once slipped in through an
# import moved to a module's top: the openai case cannot see it, since that provider needs the catalog anyway).
OFFLINE_HEAVY = ("acp_server.runtime.providers.catalog", "acp_server.runtime.providers.http_common")
MODELS = {
    "openai": (["--model", "openai:gpt-4o", "--no-store"], HEAVY_AT_START_UP),
    "scripted": (["--model", "scripted"], HEAVY_AT_START_UP + OFFLINE_HEAVY),
}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("model", sorted(MODELS))
@pytest.mark.parametrize(("line", "version"), [(INITIALIZE_V1, 1), (INITIALIZE_V2, 2)], ids=["v1", "v2"])
def test_answering_initialize_imports_nothing_heavy(line: bytes, version: int, model: str, tmp_path: Path) -> None:
    args, heavy_modules = MODELS[model]
    code = f"HEAVY = {heavy_modules!r}\nARGS = {args!r}\nINITIALIZE = {line!r}\n{_ANSWER_INITIALIZE}"
    env = {
        **os.environ,
        "ACP_SERVER_CONFIG": "/nonexistent/acp-server-test/config.toml",
        "ACP_SERVER_STATE_DIR": str(tmp_path),
        "OPENAI_API_KEY": "test",
    }
    command = [sys.executable, "-c", code]
    result = subprocess.run(command, check=False, capture_output=True, text=True, timeout=50, env=env)
    answer, _, heavy = result.stdout.strip().partition("\n")
    assert f'"protocolVersion":{version}' in answer, result.stderr
    assert '"authMethods":[]' in answer  # the provider was built: its SDK is what must wait
    assert heavy == ""


def test_jsonrpcserver_is_used_through_its_public_api_only() -> None:
    """Its package is imported whole and only the names it exports are used (no private module, no package swapped
    in `sys.modules`), and no private attribute of its results is read (`_value`, `_error`)."""
    exported = set(jsonrpcserver.__all__)
    for name, tree in modules():
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.ImportFrom)
                and node.module
                and node.module.split(".")[0] in ("jsonrpcserver", "oslash")
            ):
                assert node.module == "jsonrpcserver", f"{name} imports {node.module}"
                assert {alias.name for alias in node.names} <= exported, f"{name} imports a private name"
            if isinstance(node, ast.Import):
                dotted = [alias.name for alias in node.names if alias.name.startswith(("jsonrpcserver.", "oslash"))]
                assert not dotted, f"{name} imports {dotted}"
            targets = (
                node.targets
                if isinstance(node, (ast.Assign, ast.Delete))
                else [node.target]
                if isinstance(node, (ast.AugAssign, ast.AnnAssign))
                else []
            )
            for target in targets:
                swapped = isinstance(target, ast.Subscript) and ast.unparse(target.value) == "sys.modules"
                assert not swapped, f"{name} assigns to sys.modules"
            if name == "acp_server.jsonrpc.rpc" and isinstance(node, ast.Attribute):
                assert node.attr not in ("_value", "_error"), f"rpc.py reads {node.attr} of a jsonrpcserver result"
