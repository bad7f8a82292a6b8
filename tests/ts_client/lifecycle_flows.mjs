// The unstable session lifecycle methods of ACP 2.4.0 driven by the official TypeScript SDK's unstable entries
// (`@agentclientprotocol/sdk/unstable` for v1, `@agentclientprotocol/sdk/experimental/v2/unstable` for v2), pinned
// in package-lock.json: `session/set_title`, `session/status`, `session/archive`, `session/unarchive`, and on v2
// `session/fork`. tests/e2e/test_ts_sdk_lifecycle.py runs `node lifecycle_flows.mjs GROUP -- SERVER_COMMAND...`; this
// script spawns the server (its store in the environment's state directory), runs the group, and prints one JSON
// object: what each step answered (a result, or the error's code, data and message), `schemaErrors` (every response the
// SDK's unstable zod schemas rejected; the connection itself checks what it handles) and `wire` (every message in
// order, which the pytest side checks against the official JSON schemas). Judging is the pytest side's.
import * as acp from "@agentclientprotocol/sdk/unstable";
import * as acpV2 from "@agentclientprotocol/sdk/experimental/v2/unstable";
import { answer, finish, responsesIn, until, watchedAgent, zodSchemas } from "./common.mjs";

const zodV1 = await zodSchemas("v1/unstable");
const zodV2 = await zodSchemas("v2/unstable");

const LIFECYCLE = (zod) => ({
  initialize: zod.zInitializeResponse,
  "session/new": zod.zNewSessionResponse,
  "session/list": zod.zListSessionsResponse,
  "session/close": zod.zCloseSessionResponse,
  "session/prompt": zod.zPromptResponse,
  "session/resume": zod.zResumeSessionResponse,
  "session/fork": zod.zForkSessionResponse,
  "session/set_title": zod.zSetSessionTitleResponse,
  "session/status": zod.zSessionStatusResponse,
  "session/archive": zod.zArchiveSessionResponse,
  "session/unarchive": zod.zUnarchiveSessionResponse,
});
const V1_RESPONSES = { ...LIFECYCLE(zodV1), "session/load": zodV1.zLoadSessionResponse };
const V2_RESPONSES = LIFECYCLE(zodV2);

const listed = (list) => list.sessions.map((s) => ({ sessionId: s.sessionId, title: s.title ?? null, archived: s.archived }));

/** v1 through `@agentclientprotocol/sdk/unstable`, with the SDK's method names (`methods.agent.session.*`). */
async function v1Flows(command) {
  const out = { schemaChecked: 0, schemaErrors: [], wire: [] };
  const updates = [];
  const { stream, exited, child } = watchedAgent(acp, { command }, out, responsesIn(V1_RESPONSES));
  const m = acp.methods.agent.session;
  const app = acp.client({ name: "acp-server-ts-lifecycle" }).onNotification(acp.methods.client.session.update, ({ params }) => {
    updates.push(params);
  });
  await app.connectWith(stream, async (ctx) => {
    const req = (method, params) => answer(ctx.request(method, params), method);
    out.initialize = (await req(acp.methods.agent.initialize, { protocolVersion: 1, clientCapabilities: {} })).result;
    const cwd = process.cwd();
    const first = (await req(m.new, { cwd, mcpServers: [] })).result.sessionId;
    const second = (await req(m.new, { cwd, mcpServers: [] })).result.sessionId;
    out.ids = { first, second };
    out.setTitle = await req(m.setTitle, { sessionId: first, title: "  Renamed \n  by the SDK  " });
    out.statusOpen = await req(m.status, { sessionId: first });
    out.archive = await req(m.archive, { sessionId: second });
    out.statusArchived = await req(m.status, { sessionId: second });
    out.listDefault = listed((await req(m.list, { cwd })).result);
    out.listOnly = listed((await req(m.list, { cwd, archived: "only" })).result);
    out.loadArchived = await req(m.load, { sessionId: second, cwd, mcpServers: [] });
    out.unarchive = await req(m.unarchive, { sessionId: second });
    out.listAfterUnarchive = listed((await req(m.list, { cwd })).result);
    out.loadUnarchived = await req(m.load, { sessionId: second, cwd, mcpServers: [] });
    out.close = await req(m.close, { sessionId: first });
    out.statusClosed = await req(m.status, { sessionId: first });
    const mark = updates.length;
    out.loadTitled = await req(m.load, { sessionId: first, cwd, mcpServers: [] });
    out.replayedTitles = updates
      .slice(mark)
      .filter((n) => n.sessionId === first && n.update.sessionUpdate === "session_info_update")
      .map((n) => n.update.title);
    out.statusUnknown = await req(m.status, { sessionId: "sess_unknown" });
    out.setTitleUnknown = await req(m.setTitle, { sessionId: "sess_unknown", title: "x" });
    out.archiveUnknown = await req(m.archive, { sessionId: "sess_unknown" });
    out.unarchiveUnknown = await req(m.unarchive, { sessionId: "sess_unknown" });
  });
  return finish(out, exited, child);
}

/** v2 through `@agentclientprotocol/sdk/experimental/v2/unstable`: the same methods, and `session/fork`. */
async function v2Flows(command) {
  const out = { schemaChecked: 0, schemaErrors: [], wire: [] };
  const updates = [];
  const { stream, exited, child } = watchedAgent(acpV2, { command }, out, responsesIn(V2_RESPONSES));
  const m = acpV2.methods.agent.session;
  const app = acpV2
    .client({ name: "acp-server-ts-lifecycle" })
    .onNotification(acpV2.methods.client.session.update, ({ params }) => updates.push(params));
  const idle = (sessionId, since) =>
    until(
      () =>
        updates
          .slice(since)
          .find((n) => n.sessionId === sessionId && n.update.sessionUpdate === "state_update" && n.update.state === "idle")
          ?.update,
      "idle",
    );
  await app.connectWith(stream, async (ctx) => {
    const req = (method, params) => answer(ctx.request(method, params), method);
    out.initialize = (
      await req(acpV2.methods.agent.initialize, { protocolVersion: 2, info: { name: "ts", version: "1" }, capabilities: {} })
    ).result;
    const cwd = process.cwd();
    const source = (await req(m.new, { cwd })).result.sessionId;
    let mark = updates.length;
    await req(m.prompt, { sessionId: source, prompt: [{ type: "text", text: "go" }], _meta: { scripted: [{ say: "forked words" }] } });
    await idle(source, mark);
    out.fork = await req(m.fork, { sessionId: source, cwd });
    const fork = out.fork.result.sessionId;
    out.ids = { source, fork };
    mark = updates.length;
    await req(m.close, { sessionId: fork });
    out.resumeFork = await req(m.resume, { sessionId: fork, cwd, replayFrom: { type: "start" } });
    out.forkReplay = updates
      .slice(mark)
      .filter((n) => n.sessionId === fork && n.update.sessionUpdate === "agent_message")
      .map((n) => n.update.content.map((b) => b.text).join(""));
    out.forkUnknown = await req(m.fork, { sessionId: "sess_unknown", cwd });
    out.setTitle = await req(m.setTitle, { sessionId: source, title: "  Renamed \n  by the SDK  " });
    out.statusOpen = await req(m.status, { sessionId: source });
    out.archive = await req(m.archive, { sessionId: fork });
    out.statusArchived = await req(m.status, { sessionId: fork });
    out.listDefault = listed((await req(m.list, { cwd })).result);
    out.listOnly = listed((await req(m.list, { cwd, archived: "only" })).result);
    out.resumeArchived = await req(m.resume, { sessionId: fork, cwd });
    out.unarchive = await req(m.unarchive, { sessionId: fork });
    out.listAfterUnarchive = listed((await req(m.list, { cwd })).result);
    out.resumeUnarchived = await req(m.resume, { sessionId: fork, cwd });
    out.close = await req(m.close, { sessionId: source });
    out.statusClosed = await req(m.status, { sessionId: source });
    out.statusUnknown = await req(m.status, { sessionId: "sess_unknown" });
    out.setTitleUnknown = await req(m.setTitle, { sessionId: "sess_unknown", title: "x" });
    out.archiveUnknown = await req(m.archive, { sessionId: "sess_unknown" });
    out.unarchiveUnknown = await req(m.unarchive, { sessionId: "sess_unknown" });
  });
  return finish(out, exited, child);
}

const GROUPS = { v1: v1Flows, v2: v2Flows };

const [group, separator, ...command] = process.argv.slice(2);
if (!GROUPS[group] || separator !== "--" || command.length === 0) {
  console.error(`usage: node lifecycle_flows.mjs (${Object.keys(GROUPS).join("|")}) -- SERVER_COMMAND...`);
  process.exit(2);
}
try {
  const result = await GROUPS[group](command);
  process.stdout.write(JSON.stringify(result) + "\n");
} catch (error) {
  process.stdout.write(JSON.stringify({ fatal: String(error?.stack ?? error), data: error?.data }) + "\n");
  process.exitCode = 1;
}
