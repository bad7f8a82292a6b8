"""The warm-up makes, ahead of the first prompt, what a fresh process would otherwise make on it: the provider's SDK
import and client, the tool specs and the prompt's validator. Run in a fresh interpreter, since this test process
has imported and built all of it already."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

_WARM_UP = """
import sys, anyio
from acp_server.agent.providers import ProviderCache
from acp_server.protocol.schema import PromptRequest
from acp_server.agent.warmup import warm_up
from acp_server.runtime.providers import open_provider
from acp_server.runtime.tools import ToolBox
from acp_server.runtime.tools.files import FILE_TOOLS

opened = []
def open_model(spec):
    opened.append(spec)
    return open_provider(spec, default_model="openai:gpt-4o", base_url="http://127.0.0.1:9/v1")

providers = ProviderCache(open_model)
tools = ToolBox(FILE_TOOLS)
args = FILE_TOOLS[0].args_model
before = ("openai" in sys.modules, PromptRequest.__pydantic_complete__, args.__pydantic_complete__)

async def main():
    # What the protocol edge hands in for the first prompt (cli/server.py): the prompt's validator.
    await warm_up(providers, tools, "openai:gpt-4o", PromptRequest.model_rebuild)
    await warm_up(providers, tools, "openai:gpt-4o", PromptRequest.model_rebuild)  # once per spec: nothing more
    # A bad spec: the prompt will say so, not the warm-up.
    await warm_up(providers, tools, "nonsense", PromptRequest.model_rebuild)

anyio.run(main, backend="asyncio")
provider = providers.get("openai:gpt-4o")
made = provider.stream_cls is not None
after = ("openai" in sys.modules, PromptRequest.__pydantic_complete__, args.__pydantic_complete__, made)
print(before, after, opened, [spec.name for spec in tools.specs] == [tool.name for tool in FILE_TOOLS])
"""


@pytest.mark.timeout(60)
def test_warming_a_model_imports_its_sdk_builds_its_client_the_tool_specs_and_the_prompt_validator() -> None:
    env = {**os.environ, "ACP_SERVER_CONFIG": "/nonexistent/acp-server-test/config.toml", "OPENAI_API_KEY": "test"}
    command = [sys.executable, "-c", _WARM_UP]
    result = subprocess.run(command, check=False, capture_output=True, text=True, timeout=50, env=env)
    assert result.returncode == 0, result.stderr
    # Before: nothing made. After: the SDK, the prompt validator, a tool model, the client. Each spec opened once.
    expected = "(False, False, False) (True, True, True, True) ['openai:gpt-4o', 'nonsense'] True"
    assert result.stdout.split("\n")[0] == expected
