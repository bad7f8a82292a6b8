// The official ACP TypeScript SDK's WebSocket client through a load balancer (tests/e2e/test_load_balancer.py):
// `node remote_lb.mjs URL TOKEN COOKIE_FILE new|load [SESSION_ID]` connects with a cookie store of its own that
// outlives the process (kept in COOKIE_FILE, as a client that reconnects keeps its cookies: the SDK clears a store it
// made itself when the stream closes), sends `initialize`, then `session/new` or `session/load`, and prints one JSON
// object on stdout: the answers (or the error), the cookies held after the upgrade, and how long the connection and
// `initialize` took. Judging is left to the pytest side.
import { readFileSync, writeFileSync, existsSync } from "node:fs";
import WebSocket from "ws";
import * as acp from "@agentclientprotocol/sdk";
import { createWebSocketStream, MemoryAcpCookieStore } from "@agentclientprotocol/sdk/experimental/ws-client";

const [url, token, cookieFile, action, sessionId] = process.argv.slice(2);
const STEP_TIMEOUT_MS = Number(process.env.TS_FLOW_STEP_TIMEOUT_MS || "15000");

/** The SDK's in-memory store, read from and written back to a file: the caller owns it. */
class FileCookieStore extends MemoryAcpCookieStore {
  constructor(path) {
    super();
    this.path = path;
    if (existsSync(path)) {
      for (const [name, value] of Object.entries(JSON.parse(readFileSync(path, "utf8")))) this.cookies.set(name, value);
    }
  }
  store(headers) {
    super.store(headers);
    writeFileSync(this.path, JSON.stringify(Object.fromEntries(this.cookies)));
  }
}

function withTimeout(promise, what) {
  let timer;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out waiting for ${what}`)), STEP_TIMEOUT_MS);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

const cookieStore = new FileCookieStore(cookieFile);
const out = { sent: Object.fromEntries(cookieStore.cookies) };
const started = performance.now();
try {
  const stream = createWebSocketStream(url, { WebSocket, headers: { Authorization: `Bearer ${token}` }, cookieStore });
  const app = acp.client({ name: "acp-server-remote-lb" });
  await app.connectWith(stream, async (ctx) => {
    const req = (method, params) => withTimeout(ctx.request(method, params), method);
    out.initialize = await req("initialize", { protocolVersion: 1, clientCapabilities: {} });
    out.initializedMs = performance.now() - started;
    if (action === "new") {
      out.session = await req("session/new", { cwd: process.cwd(), mcpServers: [] });
    } else {
      out.session = await req("session/load", { sessionId, cwd: process.cwd(), mcpServers: [] });
    }
  });
} catch (error) {
  out.error = String(error?.message ?? error);
}
out.cookies = Object.fromEntries(cookieStore.cookies);
process.stdout.write(JSON.stringify(out) + "\n");
process.exit(0);
