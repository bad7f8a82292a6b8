// The official ACP TypeScript SDK's WebSocket client (`createWebSocketStream`, with the `ws` package pinned in
// package-lock.json) against acp-server's remote transport: tests/e2e/test_remote_transport.py runs
// `node remote_ws.mjs URL TOKEN bearer|subprotocol` against a server it started, and this script connects through the
// SDK's client-side connection, sends `initialize` and one more request, and prints one JSON object on stdout: the
// answers, or the error the SDK reported. Judging is left to the pytest side.
import WebSocket from "ws";
import * as acp from "@agentclientprotocol/sdk";
import { createWebSocketStream } from "@agentclientprotocol/sdk/experimental/ws-client";

const [url, token, how] = process.argv.slice(2);
const STEP_TIMEOUT_MS = Number(process.env.TS_FLOW_STEP_TIMEOUT_MS || "15000");

function withTimeout(promise, what) {
  let timer;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out waiting for ${what}`)), STEP_TIMEOUT_MS);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

const options =
  how === "subprotocol"
    ? { WebSocket, protocols: ["acp", `acp.bearer.${token}`] }
    : { WebSocket, headers: { Authorization: `Bearer ${token}` } };
const out = {};
try {
  const stream = createWebSocketStream(url, options);
  const app = acp.client({ name: "acp-server-remote-ws" });
  await app.connectWith(stream, async (ctx) => {
    const req = (method, params) => withTimeout(ctx.request(method, params), method);
    out.initialize = await req("initialize", {
      protocolVersion: 1,
      clientCapabilities: { fs: { readTextFile: false, writeTextFile: false }, terminal: false },
      clientInfo: { name: "acp-server-remote-ws", version: "1" },
    });
    out.next = await req("session/new", { cwd: process.cwd(), mcpServers: [] });
  });
} catch (error) {
  out.error = String(error?.message ?? error);
}
process.stdout.write(JSON.stringify(out) + "\n");
process.exit(0);
