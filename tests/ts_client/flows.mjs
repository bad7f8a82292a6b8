// The official ACP TypeScript SDK (@agentclientprotocol/sdk, pinned in package-lock.json) as a real third-party client
// of acp-server: tests/e2e/test_ts_sdk.py runs `node flows.mjs GROUP -- SERVER_COMMAND...`, this script spawns the
// server, drives one group of flows through the SDK's client-side connection over stdio, and prints one JSON object
// on stdout: what each flow saw, and `schemaErrors`, every agent message the SDK's own zod schemas rejected (the
// connection validates incoming requests and notifications; responses it passes on unchecked, so they are checked
// here with the same generated schemas), and `wire`, every message each way in order (the pytest side checks it
// against the official JSON schema too). Judging is left to the pytest side; this script only records.
// `node flows.mjs GROUP --ws URL` runs the same flows over the SDK's WebSocket client (`createWebSocketStream`, with
// the pinned `ws` package) against an `acp-server serve` the caller started, with the token from ACP_FLOWS_TOKEN (not
// an argument: `ps` shows those); `exit` is then null, the server being the caller's to stop.
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import * as acp from "@agentclientprotocol/sdk";
import * as acpV2 from "@agentclientprotocol/sdk/experimental/v2";
import { serverExit, watchedAgent, withTimeout, zodSchemas } from "./common.mjs";

const zodV1 = await zodSchemas("v1");
const zodV2 = await zodSchemas("v2");

const V1_RESPONSES = {
  initialize: zodV1.zInitializeResponse,
  "session/new": zodV1.zNewSessionResponse,
  "session/load": zodV1.zLoadSessionResponse,
  "session/list": zodV1.zListSessionsResponse,
  "session/close": zodV1.zCloseSessionResponse,
  "session/prompt": zodV1.zPromptResponse,
};
const V1_FROM_AGENT = {
  "session/update": zodV1.zSessionNotification,
  "session/request_permission": zodV1.zRequestPermissionRequest,
};

const V2_RESPONSES = {
  initialize: zodV2.zInitializeResponse,
  "session/new": zodV2.zNewSessionResponse,
  "session/prompt": zodV2.zPromptResponse,
  "session/list": zodV2.zListSessionsResponse,
  "tool_call/cancel": zodV2.zCancelToolCallResponse,
  "terminal/cancel": zodV2.zCancelTerminalResponse,
  "session/set_config_option": zodV2.zSetSessionConfigOptionResponse,
  "session/close": zodV2.zCloseSessionResponse,
  "session/resume": zodV2.zResumeSessionResponse,
};
const V2_FROM_AGENT = {
  "session/update": zodV2.zUpdateSessionNotification,
  "session/request_permission": zodV2.zRequestPermissionRequest,
};

/** Requests and notifications from the agent checked by their method, responses by the method they answer. */
const checkIn = (responses, fromAgent) => (message, sent) => {
  if ("method" in message) return { what: message.method, schema: fromAgent[message.method], value: message.params };
  if ("result" in message) return { what: `response to ${sent}`, schema: responses[sent], value: message.result };
  return undefined;
};

/** What the client side records: every session/update in order, every probe, every permission request. */
function recorder() {
  const updates = [];
  const probes = [];
  const permissions = [];
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
  return {
    updates,
    probes,
    permissions,
    addUpdate(u) {
      updates.push(u);
      poke();
    },
    addProbe(p) {
      probes.push(p);
      poke();
    },
    waitFor(find, what) {
      const found = find();
      if (found !== undefined) return Promise.resolve(found);
      return withTimeout(new Promise((resolve) => waiters.push({ find, resolve })), what);
    },
  };
}

function textsOf(updates, sessionId, kind = "agent_message_chunk") {
  return updates
    .filter((n) => n.sessionId === sessionId && n.update.sessionUpdate === kind && n.update.content.type === "text")
    .map((n) => n.update.content.text);
}

async function v1Flows(target) {
  const out = { schemaChecked: 0, schemaErrors: [], wire: [] };
  const rec = recorder();
  const { stream, exited, child } = watchedAgent(acp, target, out, checkIn(V1_RESPONSES, V1_FROM_AGENT));
  const app = acp
    .client({ name: "acp-server-ts-flows" })
    .onNotification(acp.methods.client.session.update, ({ params }) => rec.addUpdate(params))
    .onRequest(acp.methods.client.session.requestPermission, ({ params }) => {
      rec.permissions.push(params);
      const allow = params.options.find((o) => o.kind === "allow_once");
      return { outcome: { outcome: "selected", optionId: allow.optionId } };
    })
    .onNotification("*", ({ method, params }) => {
      if (method === "_scripted/probe") rec.addProbe(params);
    });
  await app.connectWith(stream, async (ctx) => {
    const req = (method, params, what = method) => withTimeout(ctx.request(method, params), what);
    const prompt = (sessionId, script, text = "go") =>
      req("session/prompt", { sessionId, prompt: [{ type: "text", text }], _meta: { scripted: script } });

    out.initialize = await req("initialize", {
      protocolVersion: 1,
      clientCapabilities: { fs: { readTextFile: false, writeTextFile: false }, terminal: false },
      clientInfo: { name: "acp-server-ts-flows", version: "1" },
    });
    const cwd = process.cwd();
    const created = await req("session/new", { cwd, mcpServers: [] });
    const sessionId = created.sessionId;
    out.newSession = created;

    // A streamed prompt: several chunks of one message, then end_turn.
    let mark = rec.updates.length;
    const streamed = await prompt(sessionId, [{ say: "hello, " }, { say: "typescript " }, { say: "sdk" }], "stream");
    out.streamed = { stopReason: streamed.stopReason, texts: textsOf(rec.updates.slice(mark), sessionId) };

    // Cancel while the turn waits on a gate: the prompt answers cancelled; the next prompt ends end_turn.
    mark = rec.updates.length;
    const gated = prompt(sessionId, [{ say: "before" }, { gate: "g1" }, { say: "after" }], "gated");
    await rec.waitFor(() => rec.probes.find((p) => p.event === "gate_reached" && p.sessionId === sessionId), "the gate");
    await ctx.notify(acp.methods.agent.session.cancel, { sessionId });
    const cancelled = await gated;
    await ctx.notify("_scripted/release", { sessionId, gate: "g1" });
    const cancelledTexts = textsOf(rec.updates.slice(mark), sessionId);
    mark = rec.updates.length;
    const after = await prompt(sessionId, [{ say: "ok" }], "next");
    out.cancel = {
      stopReason: cancelled.stopReason,
      texts: cancelledTexts,
      nextStopReason: after.stopReason,
      nextTexts: textsOf(rec.updates.slice(mark), sessionId),
    };

    // A permission request, answered allow-once by the handler above.
    mark = rec.updates.length;
    const permission = {
      toolCall: { toolCallId: "call_1", title: "write /y" },
      options: [
        { optionId: "allow-once", name: "Allow", kind: "allow_once" },
        { optionId: "reject-once", name: "Reject", kind: "reject_once" },
      ],
    };
    const asked = await prompt(sessionId, [
      { tool: "test_client_request", args: { method: "session/request_permission", params: permission } },
      { say: "granted" },
    ], "ask");
    out.permission = {
      stopReason: asked.stopReason,
      requests: rec.permissions.map((p) => ({ sessionId: p.sessionId, optionIds: p.options.map((o) => o.optionId) })),
      toolResults: rec.updates
        .slice(mark)
        .filter((n) => n.update.sessionUpdate === "tool_call_update" && n.update.status === "completed")
        .map((n) => n.update.rawOutput),
      texts: textsOf(rec.updates.slice(mark), sessionId),
    };

    // list, close, then load the closed session back with its history replayed.
    out.list = await req("session/list", { cwd });
    out.close = await req("session/close", { sessionId });
    mark = rec.updates.length;
    out.load = await req("session/load", { sessionId, cwd, mcpServers: [] });
    const replay = rec.updates.slice(mark).filter((n) => n.sessionId === sessionId);
    out.loadReplay = {
      userTexts: textsOf(replay, sessionId, "user_message_chunk"),
      agentTexts: textsOf(replay, sessionId),
    };
    // The loaded session works like a new one.
    mark = rec.updates.length;
    const reloaded = await prompt(sessionId, [{ say: "again" }], "reloaded");
    out.afterLoad = { stopReason: reloaded.stopReason, texts: textsOf(rec.updates.slice(mark), sessionId) };
    out.finalClose = await req("session/close", { sessionId });
  });
  // connectWith closed the connection (the server's stdin): it exits on its own.
  out.exit = await serverExit(exited, child);
  return out;
}

/** The v2 draft through the SDK's experimental/v2 entry: the prompt is answered on acceptance, the turn ends idle. */
async function v2Flows(target) {
  const out = { schemaChecked: 0, schemaErrors: [], wire: [] };
  const rec = recorder();
  const { stream, exited, child } = watchedAgent(acpV2, target, out, checkIn(V2_RESPONSES, V2_FROM_AGENT));
  const app = acpV2
    .client({ name: "acp-server-ts-flows" })
    .onNotification(acpV2.methods.client.session.update, ({ params }) => rec.addUpdate(params))
    .onRequest(acpV2.methods.client.session.requestPermission, ({ params }) => {
      // v2's shape: the question's own title and a subject (the SDK has validated it before this runs).
      rec.permissions.push(params);
      const allow = params.options.find((o) => o.kind === "allow_once");
      return { outcome: { outcome: "selected", optionId: allow.optionId } };
    })
    .onNotification("*", ({ method, params }) => {
      if (method === "_scripted/probe") rec.addProbe(params);
    });
  const states = (sessionId, since) =>
    rec.updates
      .slice(since)
      .filter((n) => n.sessionId === sessionId && n.update.sessionUpdate === "state_update")
      .map((n) => ({ state: n.update.state, stopReason: n.update.stopReason }));
  const idleAfter = (sessionId, since) =>
    rec.waitFor(
      () =>
        rec.updates
          .slice(since)
          .find((n) => n.sessionId === sessionId && n.update.sessionUpdate === "state_update" && n.update.state === "idle"),
      "idle",
    );
  const kinds = (sessionId, since) =>
    rec.updates.slice(since).filter((n) => n.sessionId === sessionId).map((n) => n.update.sessionUpdate);
  await app.connectWith(stream, async (ctx) => {
    const req = (method, params, what = method) => withTimeout(ctx.request(method, params), what);
    const prompt = (sessionId, script, text = "go") =>
      req("session/prompt", { sessionId, prompt: [{ type: "text", text }], _meta: { scripted: script } });

    out.initialize = await req("initialize", {
      protocolVersion: 2,
      info: { name: "acp-server-ts-flows", version: "1" },
      capabilities: {},
    });
    const created = await req("session/new", { cwd: process.cwd() });
    const sessionId = created.sessionId;
    out.newSession = { sessionId, cwd: process.cwd() };

    // A prompt held at a gate is acknowledged before its work runs; released, it runs to idle end_turn.
    let mark = rec.updates.length;
    const acknowledged = await prompt(sessionId, [{ gate: "g" }, { say: "hello " }, { say: "v2" }], "first");
    await rec.waitFor(() => rec.probes.find((p) => p.event === "gate_reached" && p.sessionId === sessionId), "the gate");
    const beforeRelease = { states: states(sessionId, mark), texts: textsOf(rec.updates.slice(mark), sessionId) };
    await ctx.notify("_scripted/release", { sessionId, gate: "g" });
    await idleAfter(sessionId, mark);
    out.prompt = {
      response: acknowledged,
      beforeRelease,
      states: states(sessionId, mark),
      texts: textsOf(rec.updates.slice(mark), sessionId),
      kinds: kinds(sessionId, mark),
    };

    // session/cancel during a gate: the turn ends idle cancelled with only what came before the gate.
    mark = rec.updates.length;
    rec.probes.length = 0;
    const cancelled = await prompt(sessionId, [{ say: "before" }, { gate: "g2" }, { say: "after" }], "second");
    await rec.waitFor(() => rec.probes.find((p) => p.event === "gate_reached" && p.sessionId === sessionId), "the gate");
    await ctx.notify(acpV2.methods.agent.session.cancel, { sessionId });
    await idleAfter(sessionId, mark);
    await ctx.notify("_scripted/release", { sessionId, gate: "g2" });
    out.cancel = {
      response: cancelled,
      states: states(sessionId, mark),
      texts: textsOf(rec.updates.slice(mark), sessionId),
    };
    // The session goes on.
    mark = rec.updates.length;
    await prompt(sessionId, [{ say: "ok" }], "third");
    await idleAfter(sessionId, mark);
    out.next = { states: states(sessionId, mark), texts: textsOf(rec.updates.slice(mark), sessionId) };

    // tool_call/cancel stops the running call alone: it ends cancelled and the turn goes on to idle end_turn.
    mark = rec.updates.length;
    await prompt(sessionId, [{ tool: "test_sleep", args: { s: 30 } }, { say: "went on" }], "fourth");
    const cancellable = await rec.waitFor(
      () =>
        rec.updates
          .slice(mark)
          .find((n) => n.sessionId === sessionId && n.update.capabilities && "cancel" in n.update.capabilities),
      "a cancellable tool call",
    );
    const toolCallId = cancellable.update.toolCallId;
    const toolCancel = await req("tool_call/cancel", { sessionId, toolCallId });
    await idleAfter(sessionId, mark);
    out.toolCancel = {
      response: toolCancel,
      statuses: rec.updates
        .slice(mark)
        .filter((n) => n.update.sessionUpdate === "tool_call_update" && n.update.toolCallId === toolCallId)
        .map((n) => n.update.status ?? null),
      states: states(sessionId, mark),
      texts: textsOf(rec.updates.slice(mark), sessionId),
    };

    // A prompt sent while work runs is held (queue, the v2 default): answered only after the running work's idle.
    mark = rec.updates.length;
    rec.probes.length = 0;
    const first = await prompt(sessionId, [{ gate: "h" }, { say: "one" }], "fifth");
    await rec.waitFor(() => rec.probes.find((p) => p.event === "gate_reached" && p.sessionId === sessionId), "the gate");
    const heldPromise = prompt(sessionId, [{ say: "two" }], "sixth");
    await ctx.notify("_scripted/release", { sessionId, gate: "h" });
    const held = await heldPromise;
    const idles = () => states(sessionId, mark).filter((x) => x.state === "idle").length;
    await rec.waitFor(() => (idles() >= 2 ? true : undefined), "two idles");
    const wireIndex = (pred) => out.wire.findIndex(pred);
    const isIdle = (e) =>
      e.dir === "agent" &&
      e.message.method === "session/update" &&
      e.message.params.sessionId === sessionId &&
      e.message.params.update.sessionUpdate === "state_update" &&
      e.message.params.update.state === "idle";
    const firstAnswer = wireIndex((e) => e.dir === "agent" && e.message.result?.messageId === first.messageId);
    const heldAnswer = wireIndex((e) => e.dir === "agent" && e.message.result?.messageId === held.messageId);
    const firstIdle = out.wire.findIndex((e, i) => i > firstAnswer && isIdle(e));
    out.held = {
      heldAnsweredAfterTheFirstIdle: firstIdle !== -1 && firstIdle < heldAnswer,
      distinctMessageIds: first.messageId !== held.messageId,
      states: states(sessionId, mark),
      texts: textsOf(rec.updates.slice(mark), sessionId),
    };

    // Two real permission questions (mode `default`): an edit asks about its tool call, a command about the command
    // line and where it runs. The foreground is `requires_action` while each waits, `running` once answered.
    mark = rec.updates.length;
    const edit = { tool: "write_file", args: { path: "asked.txt", content: "granted\n" } };
    const ask = { tool: "run_command", args: { command: "echo allowed" } };
    await prompt(sessionId, [edit, ask, { say: "granted" }], "asked");
    await idleAfter(sessionId, mark);
    const asked = rec.updates.slice(mark).filter((n) => n.sessionId === sessionId);
    const written = join(process.cwd(), "asked.txt");
    out.permission = {
      requests: rec.permissions.map((p) => ({
        sessionId: p.sessionId,
        title: p.title,
        subject: p.subject.type,
        toolCallId: p.subject.type === "tool_call" ? p.subject.toolCall.toolCallId : p.subject.toolCallId,
        command: p.subject.command ?? null,
        cwd: p.subject.cwd ?? null,
        optionKinds: p.options.map((o) => o.kind),
      })),
      toolCalls: [
        ...new Set(asked.filter((n) => n.update.sessionUpdate === "tool_call_update").map((n) => n.update.toolCallId)),
      ],
      finalToolStatuses: asked
        .filter((n) => n.update.sessionUpdate === "tool_call_update")
        .filter((n) => ["completed", "failed", "cancelled"].includes(n.update.status))
        .map((n) => n.update.status),
      written: existsSync(written) ? readFileSync(written, "utf8") : null,
      states: states(sessionId, mark),
      texts: textsOf(asked, sessionId),
    };

    // session/list, baseline on v2: the session, in this directory.
    out.list = await req("session/list", { cwd: process.cwd() });

    // terminal/cancel kills a running command alone: its terminal reports the signal, the turn goes on.
    await req("session/set_config_option", { sessionId, configId: "mode", type: "id", value: "bypass" });
    mark = rec.updates.length;
    const command = { tool: "run_command", args: { command: "echo started; sleep 30" } };
    await prompt(sessionId, [command, { say: "went on" }], "seventh");
    const isOutput = (n) => n.sessionId === sessionId && n.update.sessionUpdate === "terminal_output_chunk";
    const output = await rec.waitFor(() => rec.updates.slice(mark).find(isOutput), "terminal output");
    const terminalId = output.update.terminalId;
    const terminalCancel = await req("terminal/cancel", { sessionId, terminalId });
    await idleAfter(sessionId, mark);
    const since = rec.updates.slice(mark).filter((n) => n.sessionId === sessionId);
    out.terminalCancel = {
      response: terminalCancel,
      terminalId,
      exitStatuses: since.filter((n) => n.update.exitStatus != null).map((n) => n.update.exitStatus),
      finalToolStatuses: since
        .filter((n) => n.update.sessionUpdate === "tool_call_update")
        .filter((n) => ["completed", "failed"].includes(n.update.status))
        .map((n) => n.update.status),
      states: states(sessionId, mark),
      texts: textsOf(since, sessionId),
    };

    // close, then resume from the start: the history comes back as whole messages, ending idle.
    out.close = await req("session/close", { sessionId });
    mark = rec.updates.length;
    out.resume = await req("session/resume", { sessionId, cwd: process.cwd(), replayFrom: { type: "start" } });
    const replay = rec.updates.slice(mark).filter((n) => n.sessionId === sessionId);
    out.resumeReplay = {
      kinds: replay.map((n) => n.update.sessionUpdate),
      userTexts: replay
        .filter((n) => n.update.sessionUpdate === "user_message")
        .map((n) => n.update.content.map((b) => b.text).join("")),
      agentTexts: replay
        .filter((n) => n.update.sessionUpdate === "agent_message")
        .map((n) => n.update.content.map((b) => b.text).join("")),
      last: replay.at(-1)?.update,
    };
  });
  out.exit = await serverExit(exited, child);
  return out;
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
  const groups = Object.keys(GROUPS).join("|");
  console.error(`usage: node flows.mjs (${groups}) -- SERVER_COMMAND... | --ws URL (token in ACP_FLOWS_TOKEN)`);
  process.exit(2);
}
try {
  const result = await GROUPS[group](target);
  process.stdout.write(JSON.stringify(result) + "\n");
} catch (error) {
  process.stdout.write(JSON.stringify({ fatal: String(error?.stack ?? error), data: error?.data }) + "\n");
  process.exitCode = 1;
}
