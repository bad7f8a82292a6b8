// What every flow script of the official TypeScript SDK shares (flows.mjs, lifecycle_flows.mjs, provider_flows.mjs,
// mcp_flows.mjs): bounded waits, the agent's stream (a spawned server's stdio, or the SDK's WebSocket client to a
// running `acp-server serve`), a recording of every message each way with each agent message checked against the
// SDK's own zod schemas, a request's answer as data, and how the spawned server ended. Each script keeps only its own
// flows and which schema checks which message; judging is the pytest side's.
import { spawn } from "node:child_process";
import { Readable, Writable } from "node:stream";
import { createWebSocketStream } from "@agentclientprotocol/sdk/experimental/ws-client";
import WebSocket from "ws";

export const STEP_TIMEOUT_MS = Number(process.env.TS_FLOW_STEP_TIMEOUT_MS || "15000");

/** The SDK's generated zod schemas: not in its package exports, so imported by file (the very modules the
 * connection validates with), e.g. `zodSchemas("v1/unstable")`. */
export function zodSchemas(entry) {
  return import(new URL(`./node_modules/@agentclientprotocol/sdk/dist/${entry}/schema/zod.gen.js`, import.meta.url));
}

export function withTimeout(promise, what) {
  let timer;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out waiting for ${what}`)), STEP_TIMEOUT_MS);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

/** Once `check()` returns something (looked at every 10 ms), within the step timeout. */
export function until(check, what) {
  return withTimeout(
    new Promise((resolve) => {
      const look = () => {
        const found = check();
        if (found) resolve(found);
        else setTimeout(look, 10);
      };
      look();
    }),
    what,
  );
}

/** The agent's stream: a spawned server's stdio in the SDK's ndjson stream (`target.command`), or the SDK's WebSocket
 * stream to a running `serve` (`target.url`, `target.token`); `exited` is the spawned server's exit (null over
 * WebSocket: the caller stops its server). */
export function agentStream(sdk, target) {
  if (target.url !== undefined) {
    const headers = { Authorization: `Bearer ${target.token}` };
    return { child: null, stream: createWebSocketStream(target.url, { WebSocket, headers }), exited: null };
  }
  const { command } = target;
  const child = spawn(command[0], command.slice(1), { stdio: ["pipe", "pipe", "inherit"] });
  const stream = sdk.ndJsonStream(Writable.toWeb(child.stdin), Readable.toWeb(child.stdout));
  const exited = new Promise((resolve) => child.on("exit", (code, signal) => resolve({ code, signal })));
  return { child, stream, exited };
}

/** Connect to the agent (`agentStream`), recording every message each way in `out.wire`. `checkOf(message, sent)`
 * says how to check an agent message (`sent`: the method of the request a response answers): `{what, schema, value}`,
 * or nothing for a message no schema is given for; each rejection lands in `out.schemaErrors`. */
export function watchedAgent(sdk, target, out, checkOf) {
  const { child, stream, exited } = agentStream(sdk, target);
  const sentMethods = new Map();
  const readable = stream.readable.pipeThrough(
    new TransformStream({
      transform(message, controller) {
        out.wire.push({ dir: "agent", message });
        const check = checkOf(message, sentMethods.get(message.id));
        if (check?.schema) {
          out.schemaChecked += 1;
          const result = check.schema.safeParse(check.value);
          if (!result.success) out.schemaErrors.push({ what: check.what, issues: result.error.issues, value: check.value });
        }
        controller.enqueue(message);
      },
    }),
  );
  const writer = stream.writable.getWriter();
  const writable = new WritableStream({
    write(message) {
      out.wire.push({ dir: "client", message });
      if ("method" in message && "id" in message) sentMethods.set(message.id, message.method);
      return writer.write(message);
    },
    close() {
      return writer.close();
    },
  });
  return { child, stream: { readable, writable }, exited };
}

/** Responses checked by the method they answer, with `schemas` keyed by method name. */
export const responsesIn = (schemas) => (message, sent) =>
  "result" in message ? { what: sent, schema: schemas[sent], value: message.result } : undefined;

/** A request's answer as data: `{result}` or `{error: {code, data, message}}` (the SDK rejects with the JSON-RPC
 * error; anything else is the flow's own failure and is thrown on). */
export async function answer(promise, what) {
  try {
    return { result: await withTimeout(promise, what) };
  } catch (error) {
    if (typeof error?.code !== "number") throw error;
    return { error: { code: error.code, data: error.data ?? null, message: error.message } };
  }
}

/** How a spawned server ended once its stdin closed (killed when it does not end in time); null over WebSocket. */
export function serverExit(exited, child) {
  if (exited === null) return null;
  return withTimeout(exited, "the server to exit").catch((error) => {
    child.kill("SIGKILL");
    return { error: String(error) };
  });
}

/** `out` with how the server ended (`exit`), once it has. */
export async function finish(out, exited, child) {
  out.exit = await serverExit(exited, child);
  return out;
}
