// ACP 2.4.0's unstable `auth/status` (with `auth/status_update`) and `providers/list`, `providers/set`,
// `providers/disable`, driven by the official TypeScript SDK's unstable entries (`@agentclientprotocol/sdk/unstable`
// for v1, `@agentclientprotocol/sdk/experimental/v2/unstable` for v2), pinned in package-lock.json.
// tests/e2e/test_ts_sdk_providers.py runs `node provider_flows.mjs GROUP -- SERVER_COMMAND...` with the client's
// gateway URL and key in TS_GATEWAY_URL and TS_GATEWAY_KEY; this script spawns the server, routes `openai` through the
// gateway, prompts once, disables the provider, and prints one JSON object: what each step answered, the
// `auth/status_update` notifications it received, `schemaErrors` (every response or notification the SDK's unstable
// zod schemas rejected) and `wire` (every message in order, which the pytest side checks against the official JSON
// schemas). Judging is the pytest side's.
import * as acp from "@agentclientprotocol/sdk/unstable";
import * as acpV2 from "@agentclientprotocol/sdk/experimental/v2/unstable";
import { answer, finish, until, watchedAgent, zodSchemas } from "./common.mjs";

const zodV1 = await zodSchemas("v1/unstable");
const zodV2 = await zodSchemas("v2/unstable");

const CHECKED = (zod) => ({
  initialize: zod.zInitializeResponse,
  "session/new": zod.zNewSessionResponse,
  "session/prompt": zod.zPromptResponse,
  "auth/status": zod.zAuthStatusResponse,
  "providers/list": zod.zListProvidersResponse,
  "providers/set": zod.zSetProviderResponse,
  "providers/disable": zod.zDisableProviderResponse,
  "auth/status_update": zod.zAuthStatusUpdateNotification,
});

const GATEWAY_URL = process.env.TS_GATEWAY_URL;
const GATEWAY_KEY = process.env.TS_GATEWAY_KEY;

/** Responses by the method they answer, and the `auth/status_update` notification. */
const checkIn = (schemas) => (message, sent) => {
  if ("result" in message) return { what: sent, schema: schemas[sent], value: message.result };
  if (message.method === "auth/status_update") return { what: message.method, schema: schemas[message.method], value: message.params };
  return undefined;
};

const routed = () => ({
  providerId: "openai",
  apiType: "openai",
  baseUrl: GATEWAY_URL,
  headers: { Authorization: `Bearer ${GATEWAY_KEY}` },
});

async function steps(sdk, req, out, newSession, prompt) {
  const p = sdk.methods.agent.providers;
  out.statusBefore = await req(sdk.methods.agent.auth.status, {});
  out.listBefore = await req(p.list, {});
  out.set = await req(p.set, routed());
  out.listAfterSet = await req(p.list, {});
  const sessionId = await newSession();
  out.prompt = await prompt(sessionId, "through the client's gateway");
  out.disable = await req(p.disable, { providerId: "openai" });
  out.listAfterDisable = await req(p.list, {});
  out.statusAfterDisable = await req(sdk.methods.agent.auth.status, {});
}

async function v1Flows(command) {
  const out = { schemaChecked: 0, schemaErrors: [], wire: [], updates: [] };
  const { stream, exited, child } = watchedAgent(acp, { command }, out, checkIn(CHECKED(zodV1)));
  const app = acp
    .client({ name: "acp-server-ts-providers" })
    .onNotification(acp.methods.client.auth.statusUpdate, ({ params }) => out.updates.push(params));
  await app.connectWith(stream, async (ctx) => {
    const req = (method, params) => answer(ctx.request(method, params), method);
    out.initialize = (await req(acp.methods.agent.initialize, { protocolVersion: 1, clientCapabilities: {} })).result;
    const cwd = process.cwd();
    await steps(
      acp,
      req,
      out,
      async () => (await req(acp.methods.agent.session.new, { cwd, mcpServers: [] })).result.sessionId,
      (sessionId, text) => req(acp.methods.agent.session.prompt, { sessionId, prompt: [{ type: "text", text }] }),
    );
  });
  return finish(out, exited, child);
}

async function v2Flows(command) {
  const out = { schemaChecked: 0, schemaErrors: [], wire: [], updates: [] };
  const sessionUpdates = [];
  const { stream, exited, child } = watchedAgent(acpV2, { command }, out, checkIn(CHECKED(zodV2)));
  const app = acpV2
    .client({ name: "acp-server-ts-providers" })
    .onNotification(acpV2.methods.client.auth.statusUpdate, ({ params }) => out.updates.push(params))
    .onNotification(acpV2.methods.client.session.update, ({ params }) => sessionUpdates.push(params));
  const idle = (sessionId) =>
    until(
      () =>
        sessionUpdates.find(
          (n) => n.sessionId === sessionId && n.update.sessionUpdate === "state_update" && n.update.state === "idle",
        )?.update,
      "idle",
    );
  await app.connectWith(stream, async (ctx) => {
    const req = (method, params) => answer(ctx.request(method, params), method);
    out.initialize = (
      await req(acpV2.methods.agent.initialize, { protocolVersion: 2, info: { name: "ts", version: "1" }, capabilities: {} })
    ).result;
    const cwd = process.cwd();
    await steps(
      acpV2,
      req,
      out,
      async () => (await req(acpV2.methods.agent.session.new, { cwd })).result.sessionId,
      async (sessionId, text) => {
        const accepted = await req(acpV2.methods.agent.session.prompt, { sessionId, prompt: [{ type: "text", text }] });
        return { accepted, ended: await idle(sessionId) };
      },
    );
  });
  return finish(out, exited, child);
}

const GROUPS = { v1: v1Flows, v2: v2Flows };

const [group, separator, ...command] = process.argv.slice(2);
if (!GROUPS[group] || separator !== "--" || command.length === 0 || !GATEWAY_URL || !GATEWAY_KEY) {
  console.error(`usage: TS_GATEWAY_URL=... TS_GATEWAY_KEY=... node provider_flows.mjs (v1|v2) -- SERVER_COMMAND...`);
  process.exit(2);
}
try {
  const result = await GROUPS[group](command);
  process.stdout.write(JSON.stringify(result) + "\n");
} catch (error) {
  process.stdout.write(JSON.stringify({ fatal: String(error?.stack ?? error), data: error?.data }) + "\n");
  process.exitCode = 1;
}
