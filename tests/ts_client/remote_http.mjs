// The official ACP TypeScript SDK's Streamable HTTP client (`createHttpStream`, Node's fetch) against
// `acp-server serve`: tests/e2e/test_remote_http.py runs `node remote_http.mjs URL TOKEN 1|2` against a server it
// started (in the server's workspace root, the cwd of the sessions), and this script runs, through the SDK's
// client-side connection of that protocol version: initialize, session/new, a prompt whose chunks stream, and a
// prompt cancelled at a gate. It prints one JSON object on stdout: what it saw, the agent's messages the SDK's own
// zod schemas rejected (`schemaErrors`), and every message each way (`wire`, checked against the official JSON
// schema on the pytest side), or the error the SDK reported. Judging is left to the pytest side.
import * as acp from "@agentclientprotocol/sdk";
import * as acpV2 from "@agentclientprotocol/sdk/experimental/v2";
import { createHttpStream } from "@agentclientprotocol/sdk/experimental/http-client";

const [url, token, versionText] = process.argv.slice(2);
const version = Number(versionText);
const sdk = version === 2 ? acpV2 : acp;
const STEP_TIMEOUT_MS = Number(process.env.TS_FLOW_STEP_TIMEOUT_MS || "15000");
const sdkFile = (path) => new URL(`./node_modules/@agentclientprotocol/sdk/dist/${path}`, import.meta.url);
const zod = await import(sdkFile(version === 2 ? "v2/schema/zod.gen.js" : "v1/schema/zod.gen.js"));
const UPDATE = version === 2 ? zod.zUpdateSessionNotification : zod.zSessionNotification;

function withTimeout(promise, what) {
  let timer;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out waiting for ${what}`)), STEP_TIMEOUT_MS);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

const out = { schemaErrors: [], wire: [] };
const updates = [];
const probes = [];
const waiters = [];
const poke = () => {
  for (const w of [...waiters]) {
    const found = w.find();
    if (found !== undefined) {
      waiters.splice(waiters.indexOf(w), 1);
      w.resolve(found);
    }
  }
};
const waitFor = (find, what) => {
  const found = find();
  if (found !== undefined) return Promise.resolve(found);
  return withTimeout(new Promise((resolve) => waiters.push({ find, resolve })), what);
};
const textsOf = (since, sessionId) =>
  updates
    .slice(since)
    .filter((n) => n.sessionId === sessionId && n.update.sessionUpdate === "agent_message_chunk")
    .map((n) => n.update.content.text);

try {
  const http = createHttpStream(url, { headers: { Authorization: `Bearer ${token}` } });
  // Every message both ways, as the SDK's connection sees them.
  const readable = http.readable.pipeThrough(
    new TransformStream({
      transform(message, controller) {
        out.wire.push({ dir: "agent", message });
        if (message.method === "session/update") {
          const checked = UPDATE.safeParse(message.params);
          if (!checked.success) out.schemaErrors.push({ issues: checked.error.issues, message });
        }
        controller.enqueue(message);
      },
    }),
  );
  const writer = http.writable.getWriter();
  const writable = new WritableStream({
    write(message) {
      out.wire.push({ dir: "client", message });
      return writer.write(message);
    },
    close: () => writer.close(),
  });
  const app = sdk
    .client({ name: "acp-server-remote-http" })
    .onNotification(sdk.methods.client.session.update, ({ params }) => {
      updates.push(params);
      poke();
    })
    .onNotification("*", ({ method, params }) => {
      if (method === "_scripted/probe") {
        probes.push(params);
        poke();
      }
    });
  await app.connectWith({ readable, writable }, async (ctx) => {
    const req = (method, params) => withTimeout(ctx.request(method, params), method);
    const prompt = (sessionId, script, text) =>
      req("session/prompt", { sessionId, prompt: [{ type: "text", text }], _meta: { scripted: script } });
    const idleAfter = (sessionId, since) =>
      waitFor(
        () =>
          updates
            .slice(since)
            .find((n) => n.sessionId === sessionId && n.update.sessionUpdate === "state_update" && n.update.state === "idle"),
        "idle",
      );
    out.initialize =
      version === 2
        ? await req("initialize", { protocolVersion: 2, info: { name: "acp-server-remote-http", version: "1" }, capabilities: {} })
        : await req("initialize", {
            protocolVersion: 1,
            clientCapabilities: { fs: { readTextFile: false, writeTextFile: false }, terminal: false },
            clientInfo: { name: "acp-server-remote-http", version: "1" },
          });
    const created = await req("session/new", { cwd: process.cwd(), mcpServers: [] });
    const sessionId = created.sessionId;

    // A streamed prompt: several chunks of one message.
    let mark = updates.length;
    const streamed = await prompt(sessionId, [{ say: "hello, " }, { say: "typescript " }, { say: "sdk" }], "stream");
    let stopReason = streamed.stopReason;
    if (version === 2) stopReason = (await idleAfter(sessionId, mark)).update.stopReason;
    out.streamed = { stopReason, texts: textsOf(mark, sessionId) };

    // A cancel while the turn waits at a gate.
    mark = updates.length;
    const gated = prompt(sessionId, [{ say: "before" }, { gate: "g1" }, { say: "after" }], "gated");
    await waitFor(() => probes.find((p) => p.event === "gate_reached" && p.sessionId === sessionId), "the gate");
    await ctx.notify(sdk.methods.agent.session.cancel, { sessionId });
    const answered = await gated;
    stopReason = version === 2 ? (await idleAfter(sessionId, mark)).update.stopReason : answered.stopReason;
    await ctx.notify("_scripted/release", { sessionId, gate: "g1" });
    out.cancel = { stopReason, texts: textsOf(mark, sessionId) };
  });
} catch (error) {
  out.error = String(error?.stack ?? error?.message ?? error);
}
process.stdout.write(JSON.stringify(out) + "\n");
process.exit(0);
