"""A minimal ACP client: start `acp-server`, open a session, send a prompt, print the streamed reply, then show
a cancel. It uses only the standard library, so it is a readable picture of the wire protocol."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from typing import Any

HELLO = "Hello from your editor! acp-server streams this text back to you with the offline echo model."


class Wire:
    def __init__(self, *args: str) -> None:
        self.process = subprocess.Popen(["acp-server", *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        self.next_id = 0

    def send(self, method: str, params: dict[str, Any], notify: bool = False) -> int:
        message: dict[str, Any] = {"jsonrpc": "2.0", "method": method, "params": params}
        if not notify:
            self.next_id += 1
            message["id"] = self.next_id
        line = json.dumps(message)
        print(f"→ {line[:150]}")
        assert self.process.stdin is not None
        self.process.stdin.write(line.encode() + b"\n")
        self.process.stdin.flush()
        return self.next_id

    def until_response(self, request_id: int) -> dict[str, Any]:
        assert self.process.stdout is not None
        while True:
            message: dict[str, Any] = json.loads(self.process.stdout.readline())
            update = message.get("params", {}).get("update", {})
            if update.get("sessionUpdate") == "agent_message_chunk":
                print(f"← chunk {update['content']['text']!r}")
            elif message.get("method") != "_scripted/probe":
                print(f"← {json.dumps(message)[:150]}")
            if message.get("id") == request_id and "method" not in message:
                return message


def main() -> None:
    echo = Wire()
    echo.until_response(echo.send("initialize", {"protocolVersion": 1, "clientCapabilities": {}}))
    session = echo.until_response(echo.send("session/new", {"cwd": "/tmp", "mcpServers": []}))["result"]["sessionId"]
    prompt = [{"type": "text", "text": HELLO}]
    echo.until_response(echo.send("session/prompt", {"sessionId": session, "prompt": prompt}))

    print("\nNow a turn that would take 30 s, cancelled at once (scripted model):")
    scripted = Wire("--model", "scripted")
    scripted.until_response(scripted.send("initialize", {"protocolVersion": 1, "clientCapabilities": {}}))
    result = scripted.until_response(scripted.send("session/new", {"cwd": "/tmp", "mcpServers": []}))
    session = result["result"]["sessionId"]
    script = [{"say": "Thinking about it"}, {"sleep": 30}, {"say": "never sent"}]
    request = scripted.send("session/prompt", {"sessionId": session, "prompt": prompt, "_meta": {"scripted": script}})
    time.sleep(0.2)
    started = time.monotonic()
    scripted.send("session/cancel", {"sessionId": session}, notify=True)
    scripted.until_response(request)
    print(f"cancelled in {(time.monotonic() - started) * 1000:.1f} ms")
    for wire in (echo, scripted):
        assert wire.process.stdin is not None
        wire.process.stdin.close()
        wire.process.wait()
    sys.exit(0)


if __name__ == "__main__":
    main()
