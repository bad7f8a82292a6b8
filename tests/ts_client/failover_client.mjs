// The official ACP TypeScript SDK's WebSocket client as one long-lived editor that reconnects, for
// tests/e2e/test_failover.py and bench/cluster.py's failover figure: `node failover_client.mjs URL TOKEN 1|2` keeps ONE
// cookie store of its own (`MemoryAcpCookieStore`, made here and handed to every connection: the SDK clears a store it
// made itself when the stream closes, and a client that reconnects must keep its affinity cookies) and is driven line
// by line on stdin, one JSON command a line:
//   {"op": "connect"}                                   a new WebSocket connection (createWebSocketStream) with the store
//   {"op": "request", "tag": T, "method": M, "params": P}  a request on the current connection
//   {"op": "notify", "method": M, "params": P}          a notification on it
//   {"op": "close"}                                     close the current connection
// and reports on stdout, one JSON object a line: {"ev": "wire", "conn": N, "dir": "agent"|"client", "message": ...}
// for every message each way (the pytest side validates them against the official schema), {"ev": "answer", "tag": T,
// "result"|"error": ..., "cookies": ...} for each request, {"ev": "connected", "conn": N, "sent": cookies} and
// {"ev": "closed", "conn": N, "error": ...} when a connection ends (the server gone included). Protocol version 1 uses
// the SDK's v1 client, 2 its experimental v2 one; judging is left to the caller.
import { createInterface } from "node:readline";
import WebSocket from "ws";
import * as acpV1 from "@agentclientprotocol/sdk";
import * as acpV2 from "@agentclientprotocol/sdk/experimental/v2";
import { createWebSocketStream, MemoryAcpCookieStore } from "@agentclientprotocol/sdk/experimental/ws-client";

const [url, token, version] = process.argv.slice(2);
const sdk = version === "2" ? acpV2 : acpV1;
const cookieStore = new MemoryAcpCookieStore(); // the caller's (this process's), kept across reconnects

function emit(event) {
  process.stdout.write(JSON.stringify(event) + "\n");
}

function cookies() {
  const headers = new Headers();
  cookieStore.apply(headers);
  const jar = {};
  for (const pair of (headers.get("cookie") ?? "").split(";")) {
    const [name, ...rest] = pair.trim().split("=");
    if (name) jar[name] = rest.join("=");
  }
  return jar;
}

let current = null; // { id, connection }
let count = 0;

function connect() {
  const id = ++count;
  const sent = cookies();
  const stream = createWebSocketStream(url, { WebSocket, headers: { Authorization: `Bearer ${token}` }, cookieStore });
  // Every message each way, for the schema checks of the caller.
  const readable = stream.readable.pipeThrough(
    new TransformStream({
      transform(message, controller) {
        emit({ ev: "wire", conn: id, dir: "agent", message });
        controller.enqueue(message);
      },
    }),
  );
  const writer = stream.writable.getWriter();
  const writable = new WritableStream({
    write(message) {
      emit({ ev: "wire", conn: id, dir: "client", message });
      return writer.write(message);
    },
    close() {
      return writer.close();
    },
  });
  const app = sdk
    .client({ name: "acp-server-failover" })
    .onNotification("*", () => {}) // session/update and probes: the wire events carry them
    .onNotification(sdk.methods.client.session.update, () => {});
  const connection = app.connect({ readable, writable });
  current = { id, connection };
  emit({ ev: "connected", conn: id, sent });
  connection.closed.then(
    () => emit({ ev: "closed", conn: id, error: null }),
    (error) => emit({ ev: "closed", conn: id, error: String(error?.message ?? error) }),
  );
}

async function request(tag, method, params) {
  const target = current;
  try {
    const result = await target.connection.agent.request(method, params);
    emit({ ev: "answer", tag, conn: target.id, result, cookies: cookies() });
  } catch (error) {
    const shaped = { message: String(error?.message ?? error), code: error?.code ?? null, data: error?.data ?? null };
    emit({ ev: "answer", tag, conn: target.id, error: shaped, cookies: cookies() });
  }
}

const lines = createInterface({ input: process.stdin });
lines.on("line", (line) => {
  if (!line.trim()) return;
  const command = JSON.parse(line);
  if (command.op === "connect") connect();
  else if (command.op === "request") void request(command.tag, command.method, command.params);
  else if (command.op === "notify") void current.connection.agent.notify(command.method, command.params);
  else if (command.op === "close") current?.connection.close();
  else emit({ ev: "bad", command });
});
// The caller closing our stdin ends us, whatever is open.
lines.on("close", () => {
  current?.connection.close();
  setTimeout(() => process.exit(0), 50);
});
