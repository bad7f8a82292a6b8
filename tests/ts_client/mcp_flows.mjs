// ACP 2.4.0's unstable `mcp/message` (RFD "MCP-over-ACP"), driven by the official TypeScript SDK: the client offers an
// MCP server over the ACP connection itself (`McpOverAcpProvider` of `@agentclientprotocol/sdk/unstable` for v1,
// `.../experimental/v2/unstable` for v2, serving an `@modelcontextprotocol/server` server through the SDK's
// `experimental/mcp-server` entry, MCP 2026-07-28), declares it in `session/new` as `{"type": "acp"}`, and the
// scripted model calls its tools. tests/e2e/test_ts_sdk_mcp.py runs `node mcp_flows.mjs GROUP -- SERVER_COMMAND...`
// (this script spawns the server) or `node mcp_flows.mjs GROUP --ws URL` (the SDK's WebSocket client against an
// `acp-server serve` the caller started, token in ACP_FLOWS_TOKEN; `exit` is then null) and prints one JSON object: what each step answered, what the client's MCP server saw
// (`served`: each MCP method it was asked, `calls`, `aborted`: the calls the agent cancelled), `schemaErrors` (what
// the SDK's unstable zod schemas rejected) and `wire` (every message in order, which the pytest side checks against the
// official JSON schemas). Judging is the pytest side's.
import * as acp from "@agentclientprotocol/sdk/unstable";
import * as acpV2 from "@agentclientprotocol/sdk/experimental/v2/unstable";
import { fromMcpServer } from "@agentclientprotocol/sdk/experimental/mcp-server";
import { McpServer } from "@modelcontextprotocol/server";
import * as z from "zod/v4";
import { finish, until, watchedAgent, withTimeout, zodSchemas } from "./common.mjs";

const zodV1 = await zodSchemas("v1/unstable");
const zodV2 = await zodSchemas("v2/unstable");

const CHECKED = (zod) => ({
  initialize: zod.zInitializeResponse,
  "session/new": zod.zNewSessionResponse,
  "session/prompt": zod.zPromptResponse,
  "mcp/message": zod.zMessageMcpRequest,
});

const SERVER_NAME = "client-tools";
const tool = (name) => `mcp__${SERVER_NAME}__${name}`;

/** Responses by the method they answer, and our `mcp/message` requests. */
const checkIn = (schemas) => (message, sent) => {
  if ("result" in message) return { what: sent, schema: schemas[sent], value: message.result };
  if (message.method === "mcp/message" && "id" in message) return { what: message.method, schema: schemas[message.method], value: message.params };
  return undefined;
};

/** The client's MCP server: `echo` answers, `wait` blocks until the agent cancels it, `grow` adds `fresh` and says
 * the tool list changed (to the agent's open `subscriptions/listen`, as `mcp/message` notifications). */
function clientServer(out) {
  let grown = false;
  const readOnly = { readOnlyHint: true };
  const adapter = fromMcpServer(() => {
    const server = new McpServer({ name: SERVER_NAME, version: "1.0.0" });
    server.registerTool(
      "echo",
      { description: "Echo a message.", inputSchema: z.object({ message: z.string() }), annotations: readOnly },
      async ({ message }) => ({ content: [{ type: "text", text: `echo: ${message}` }] }),
    );
    server.registerTool(
      "wait",
      { description: "Wait until cancelled.", inputSchema: z.object({}), annotations: readOnly },
      async (_args, ctx) => {
        out.waiting = true;
        await new Promise((resolve) => ctx.mcpReq.signal.addEventListener("abort", resolve, { once: true }));
        out.aborted.push("wait");
        return { content: [{ type: "text", text: "cancelled" }] };
      },
    );
    server.registerTool(
      "grow",
      { description: "Add the tool fresh.", inputSchema: z.object({}), annotations: readOnly },
      async () => {
        grown = true;
        setTimeout(() => adapter.notify.toolsChanged(), 0);
        return { content: [{ type: "text", text: "grown" }] };
      },
    );
    if (grown) {
      server.registerTool(
        "fresh",
        { description: "A tool added later.", inputSchema: z.object({}), annotations: readOnly },
        async () => ({ content: [{ type: "text", text: "fresh tool" }] }),
      );
    }
    return server;
  });
  return {
    adapter,
    handler: async (cx) => {
      out.served.push(cx.method);
      if (cx.method === "tools/call") out.calls.push(cx.params?.name);
      return adapter.handler(cx);
    },
  };
}

function textsOf(updates, sessionId) {
  const texts = [];
  for (const n of updates) {
    if (n.sessionId !== sessionId) continue;
    const u = n.update;
    if (u.sessionUpdate === "tool_call_update" && Array.isArray(u.content)) {
      for (const c of u.content) if (c.type === "content" && c.content.type === "text") texts.push(c.content.text);
    }
  }
  return texts;
}

/** Both versions' steps: `newSession(declaration)`, `prompt(sessionId, script)` -> its stop reason, `cancel(id)`. */
async function steps(out, updates, newSession, prompt, cancel) {
  const sessionId = await newSession();
  let mark = updates.length;
  out.echo = await prompt(sessionId, [{ tool: tool("echo"), args: { message: "over acp" } }, { say: "done" }]);
  out.echoTexts = textsOf(updates.slice(mark), sessionId);

  // Cancel the turn while the client's tool runs: the agent withdraws its `mcp/message` request.
  const pending = prompt(sessionId, [{ tool: tool("wait"), args: {} }, { say: "never" }]);
  await until(() => out.waiting, "the wait tool to start");
  await cancel(sessionId);
  out.cancel = await pending;
  await until(() => out.aborted.length > 0, "the wait tool to see its cancellation");

  // The tool list changes under the agent's open subscription: the next turn has the new tool.
  out.grow = await prompt(sessionId, [{ tool: tool("grow"), args: {} }]);
  await until(() => out.wire.some((e) => e.message.params?.method === "notifications/tools/list_changed"), "the change");
  mark = updates.length;
  out.fresh = await prompt(sessionId, [{ tool: tool("fresh"), args: {} }]);
  out.freshTexts = textsOf(updates.slice(mark), sessionId);
}

function record() {
  return { schemaChecked: 0, schemaErrors: [], wire: [], served: [], calls: [], aborted: [], waiting: false };
}

async function v1Flows(target) {
  const out = record();
  const updates = [];
  const { stream, exited, child } = watchedAgent(acp, target, out, checkIn(CHECKED(zodV1)));
  const provider = new acp.McpOverAcpProvider();
  const served = clientServer(out);
  const app = acp
    .client({ name: "acp-server-ts-mcp" })
    .onRequest(acp.methods.client.mcp.message, provider.handleRequest)
    .onNotification(acp.methods.client.session.update, ({ params }) => updates.push(params));
  await app.connectWith(stream, async (ctx) => {
    const req = (method, params) => withTimeout(ctx.request(method, params), method);
    out.initialize = await req(acp.methods.agent.initialize, { protocolVersion: 1, clientCapabilities: {} });
    const registration = provider.registerServer(ctx, { name: SERVER_NAME, handler: served.handler });
    out.declaration = registration.declaration;
    const cwd = process.cwd();
    await steps(
      out,
      updates,
      async () => {
        const created = await req(acp.methods.agent.session.new, { cwd, mcpServers: [registration.declaration] });
        return created.sessionId;
      },
      async (sessionId, script) =>
        (
          await req(acp.methods.agent.session.prompt, {
            sessionId,
            prompt: [{ type: "text", text: "go" }],
            _meta: { scripted: script },
          })
        ).stopReason,
      (sessionId) => ctx.notify(acp.methods.agent.session.cancel, { sessionId }),
    );
    await registration.dispose();
    await served.adapter.close();
  });
  return finish(out, exited, child);
}

async function v2Flows(target) {
  const out = record();
  const updates = [];
  const { stream, exited, child } = watchedAgent(acpV2, target, out, checkIn(CHECKED(zodV2)));
  const provider = new acpV2.McpOverAcpProvider();
  const served = clientServer(out);
  const app = acpV2
    .client({ name: "acp-server-ts-mcp" })
    .onRequest(acpV2.methods.client.mcp.message, provider.handleRequest)
    .onNotification(acpV2.methods.client.session.update, ({ params }) => updates.push(params));
  const ended = (sessionId, from) =>
    until(
      () =>
        updates
          .slice(from)
          .find((n) => n.sessionId === sessionId && n.update.sessionUpdate === "state_update" && n.update.state === "idle")
          ?.update,
      "idle",
    );
  await app.connectWith(stream, async (ctx) => {
    const req = (method, params) => withTimeout(ctx.request(method, params), method);
    out.initialize = await req(acpV2.methods.agent.initialize, {
      protocolVersion: 2,
      info: { name: "ts", version: "1" },
      capabilities: {},
    });
    const registration = provider.registerServer(ctx, { name: SERVER_NAME, handler: served.handler });
    out.declaration = registration.declaration;
    const cwd = process.cwd();
    await steps(
      out,
      updates,
      async () => (await req(acpV2.methods.agent.session.new, { cwd, mcpServers: [registration.declaration] })).sessionId,
      async (sessionId, script) => {
        const from = updates.length;
        await req(acpV2.methods.agent.session.prompt, {
          sessionId,
          prompt: [{ type: "text", text: "go" }],
          _meta: { scripted: script },
        });
        return (await ended(sessionId, from)).stopReason;
      },
      (sessionId) => ctx.notify(acpV2.methods.agent.session.cancel, { sessionId }),
    );
    await registration.dispose();
    await served.adapter.close();
  });
  return finish(out, exited, child);
}

const GROUPS = { v1: v1Flows, v2: v2Flows };

const [group, separator, ...rest] = process.argv.slice(2);
const target =
  separator === "--" && rest.length > 0
    ? { command: rest }
    : separator === "--ws" && rest.length === 1 && process.env.ACP_FLOWS_TOKEN
      ? { url: rest[0], token: process.env.ACP_FLOWS_TOKEN }
      : null;
if (!GROUPS[group] || target === null) {
  console.error(`usage: node mcp_flows.mjs (v1|v2) -- SERVER_COMMAND... | --ws URL (token in ACP_FLOWS_TOKEN)`);
  process.exit(2);
}
try {
  const result = await GROUPS[group](target);
  process.stdout.write(JSON.stringify(result) + "\n");
} catch (error) {
  process.stdout.write(JSON.stringify({ fatal: String(error?.stack ?? error), data: error?.data }) + "\n");
  process.exitCode = 1;
}
