/**
 * No socket without an owner (src/server/socket_owner.ts), per kind of socket the transport takes
 * over: the owner itself, raw replies, the upgrade socket (websocket, `h2c`, a refusal), `CONNECT`,
 * both sides of a tunnel, SNI passthrough, and TLS with HTTP/2 — each left with a reset and with a
 * FIN at every stage, against an edge in this process. An error nobody owns would end this test
 * process (an uncaught error fails the run); beyond that each test asserts what a client sees
 * afterwards: every lane answers, the ledger balances with no public connection left open, and the
 * resets were counted.
 *
 * @module
 */
import assert from "node:assert/strict";
import { PassThrough } from "node:stream";
import { LINGER_MS, lingerThenClose, writeRawReply } from "../src/server/raw_reply.ts";
import { isOwned, ownSocket } from "../src/server/socket_owner.ts";
import { AbruptConnection, LEAVINGS } from "./fixtures/abrupt_client.ts";
import {
  abruptConfig,
  type AbruptPeers,
  abruptTenants,
  connectionErrors,
  type EdgeKind,
  lanesAnswer,
  quiet,
  quietTerms,
  startAbruptPeers,
} from "./fixtures/abrupt_edge.ts";
import { http1Scenarios } from "./fixtures/abrupt_http1.ts";
import { runScenarios, type Scenario, SHOP, type Targets } from "./fixtures/abrupt_scenarios.ts";
import { passthroughScenarios, tlsScenarios } from "./fixtures/abrupt_tls.ts";
import { freePorts } from "./fixtures/gateway.ts";
import { bootEdge, type TestEdge, waitFor } from "./fixtures/in_process.ts";

Deno.test("ownSocket() destroys a socket on its first error and tells its owner once", () => {
  const socket = new PassThrough();
  const told: string[] = [];
  assert.equal(ownSocket(socket, (error) => told.push(error.message)), true);
  assert.equal(isOwned(socket), true);
  socket.emit("error", new Error("read ECONNRESET"));
  socket.emit("error", new Error("write EPIPE"));
  assert.equal(socket.destroyed, true);
  assert.deepEqual(told, ["read ECONNRESET"]);
});

Deno.test("ownSocket() keeps the first owner: a second owner is not told", () => {
  const socket = new PassThrough();
  const first: string[] = [];
  const second: string[] = [];
  ownSocket(socket, (error) => first.push(error.message));
  assert.equal(ownSocket(socket, (error) => second.push(error.message)), false);
  socket.emit("error", new Error("read ECONNRESET"));
  assert.deepEqual([first, second], [["read ECONNRESET"], []]);
});

Deno.test("writeRawReply() owns the socket it writes to: an error while writing ends it alone", () => {
  const socket = new PassThrough();
  writeRawReply(socket, { status: 400, body: "no" }, { "x-request-id": "r" }, () => {});
  assert.equal(isOwned(socket), true);
  socket.emit("error", new Error("write EPIPE"));
  assert.equal(socket.destroyed, true);
});

Deno.test("writeRawReply() closes a tunnel's client side when its upstream side already ended", async () => {
  const client = new PassThrough();
  const upstream = new PassThrough();
  upstream.destroy();
  await new Promise((resolve) => upstream.once("close", resolve));
  const tunnel = { socket: upstream, head: new Uint8Array() };
  writeRawReply(client, { status: 101, rawHeaders: [], tunnel }, {}, () => {});
  await waitFor(() => client.destroyed, (gone) => gone, 1000);
});

Deno.test("lingerThenClose() reads and drops what a client still sends, so its FIN closes", async () => {
  const socket = new PassThrough();
  socket.write("unread request body");
  socket.end();
  lingerThenClose(socket);
  // With its buffered bytes drained, the stream's end arrives; with nothing reading, never.
  await waitFor(() => socket.readableEnded, (ended) => ended, 1000);
});

/** Boots an edge of `kind` beside the peers, runs `body`, and always stops both. */
async function withAbruptEdge(
  kind: EdgeKind,
  body: (t: TestEdge, targets: Targets) => Promise<void>,
): Promise<void> {
  const peers: AbruptPeers = await startAbruptPeers();
  const [passthrough] = freePorts(1);
  try {
    const t = await bootEdge({
      tenants: abruptTenants(peers, kind),
      edit: (config) => abruptConfig(config, peers, kind, passthrough),
    });
    try {
      const targets = {
        plain: t.ports.public,
        tls: t.ports.public,
        passthrough,
        hellos: peers.hellos,
      };
      await body(t, targets);
    } finally {
      await t.dispose();
    }
  } finally {
    await peers.stop();
  }
}

/**
 * Runs `list` with a reset and a FIN, then asserts the edge stands: nothing found, every lane
 * answers, the ledger quiet.
 */
async function leaveAndStand(
  t: TestEdge,
  targets: Targets,
  kind: EdgeKind,
  list: readonly Scenario[],
): Promise<void> {
  assert.ok(list.length > 0, "no scenario matched");
  const findings = await runScenarios(list, targets, LEAVINGS);
  assert.deepEqual(findings, [], findings.join("\n"));
  await lanesAnswer(t.ports, targets, kind);
  const reading = await waitFor(() => t.ledger(), quiet, 10_000).catch(() => t.ledger());
  assert.ok(quiet(reading), `not quiet: ${quietTerms(reading)}`);
}

const named = (list: readonly Scenario[], part: string) =>
  list.filter((scenario) => scenario.name.includes(part));

Deno.test("upgrade socket: a client that resets after its answer's first byte ends only its own connection", async () => {
  await withAbruptEdge("plain", async (t, targets) => {
    for (let i = 0; i < 5; i++) {
      const connection = await AbruptConnection.plain(targets.plain!);
      await connection.write(
        `GET / HTTP/1.1\r\nHost: ${SHOP}\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n`,
      );
      await connection.receive(1);
      await connection.leave("rst");
    }
    await lanesAnswer(t.ports, targets, "plain");
    const reading = await waitFor(() => t.ledger(), quiet, 5000);
    // The five upgrades, then the lane checks: ten requests and one passthrough connection.
    assert.equal(reading.lanes.public.admitted, 5 + 10 + 1);
    assert.ok(await connectionErrors(t.ports.local_health) >= 1, "the resets were counted");
  });
});

Deno.test("upgrade socket: websocket upgrades left at every stage, proxied or answered", async () => {
  await withAbruptEdge("plain", async (t, targets) => {
    await leaveAndStand(t, targets, "plain", named(http1Scenarios("plain"), "upgrade"));
  });
});

Deno.test("upgrade socket: h2c requests, with and without a body, left at every stage", async () => {
  await withAbruptEdge("plain", async (t, targets) => {
    await leaveAndStand(t, targets, "plain", named(http1Scenarios("plain"), "h2c"));
  });
});

/** An h2c request with a body (refused: nothing can frame what follows its head). */
const H2C_WITH_BODY = `POST /api/echo HTTP/1.1\r\nHost: ${SHOP}\r\n` +
  "Connection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQAAP__\r\n" +
  "Content-Length: 100000\r\n\r\n";

/** Runs `fn` with a client that keeps its side open when the edge ends its own; then resets it. */
async function withHalfOpenClient(port: number, fn: (c: AbruptConnection) => Promise<void>) {
  const connection = await AbruptConnection.plain(port, true);
  try {
    await fn(connection);
  } finally {
    connection.tcp.destroy();
  }
}

/** Public connections the edge holds now. */
const openConnections = async (t: TestEdge) => (await t.ledger()).lanes.public.connections;

Deno.test("upgrade socket: an h2c refusal whose body is unread closes once its client half-closes", async () => {
  await withAbruptEdge("plain", async (t, targets) => {
    await withHalfOpenClient(targets.plain!, async (connection) => {
      await connection.write(H2C_WITH_BODY);
      await connection.write(new Uint8Array(20_000));
      await connection.receive(12);
      assert.match(connection.text, /^HTTP\/1\.1 400 /);
      connection.stream.end();
      // Well inside the linger: the client's FIN is read, not hidden behind its unread body.
      await waitFor(() => openConnections(t), (open) => open === 0, LINGER_MS / 3);
    });
  });
});

Deno.test("upgrade socket: an upgrade a route answers closes once its client half-closes, whatever followed its head", async () => {
  await withAbruptEdge("plain", async (t, targets) => {
    await withHalfOpenClient(targets.plain!, async (connection) => {
      const upgrade =
        `GET / HTTP/1.1\r\nHost: ${SHOP}\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n`;
      await connection.write(upgrade + "x".repeat(20_000));
      await connection.receive(12);
      assert.match(connection.text, /^HTTP\/1\.1 200 /);
      connection.stream.end();
      await waitFor(() => openConnections(t), (open) => open === 0, LINGER_MS / 3);
    });
  });
});

Deno.test("upgrade socket: an h2c refusal whose client never closes is closed after the linger", async () => {
  await withAbruptEdge("plain", async (t, targets) => {
    await withHalfOpenClient(targets.plain!, async (connection) => {
      await connection.write(H2C_WITH_BODY);
      await connection.receive(12);
      assert.match(connection.text, /^HTTP\/1\.1 400 /);
      await new Promise((resolve) => setTimeout(resolve, LINGER_MS / 2));
      assert.equal(await openConnections(t), 1, "held while the client may still end it");
      await waitFor(() => openConnections(t), (open) => open === 0, LINGER_MS + 3000);
    });
  });
});

Deno.test("upgrade socket: closing the edge closes its open tunnels (node no longer tracks them)", async () => {
  const peers = await startAbruptPeers();
  const t = await bootEdge({
    tenants: abruptTenants(peers, "plain"),
    edit: (config) => abruptConfig(config, peers, "plain", freePorts(1)[0]),
  });
  const connection = await AbruptConnection.plain(t.ports.public);
  try {
    await connection.write(
      `GET /api/tunnel HTTP/1.1\r\nHost: ${SHOP}\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n`,
    );
    await connection.receive(12);
    assert.match(connection.text, /^HTTP\/1\.1 101 /);
    const closing = t.dispose().then(() => "closed");
    const late = new Promise((resolve) => setTimeout(() => resolve("still open"), 3000));
    assert.equal(
      await Promise.race([closing, late]),
      "closed",
      "the edge closed with a tunnel open",
    );
    assert.equal(await connection.closedWithin(1000), true, "the tunnel's client was closed");
  } finally {
    connection.tcp.destroy();
    await t.dispose();
    await peers.stop();
  }
});

Deno.test("CONNECT: node destroys the socket unanswered; nothing is admitted, nothing fails", async () => {
  await withAbruptEdge("plain", async (t, targets) => {
    const before = await t.ledger();
    await leaveAndStand(t, targets, "plain", named(http1Scenarios("plain"), "CONNECT"));
    const connection = await AbruptConnection.plain(targets.plain!);
    await connection.write(`CONNECT ${SHOP}:443 HTTP/1.1\r\nHost: ${SHOP}:443\r\n\r\n`);
    assert.equal(await connection.closedWithin(2000), true, "closed");
    assert.equal(connection.received, 0, "no answer");
    const after = await waitFor(() => t.ledger(), quiet, 3000);
    // Only the lane checks of leaveAndStand were admitted: ten requests, one passthrough.
    assert.equal(after.lanes.public.admitted - before.lanes.public.admitted, 10 + 1);
  });
});

Deno.test("tunnel: both sides, a client leaving mid-tunnel and an upstream resetting it", async () => {
  await withAbruptEdge("plain", async (t, targets) => {
    const list = http1Scenarios("plain").filter((s) => /mid-tunnel|upstream resets/.test(s.name));
    await leaveAndStand(t, targets, "plain", list);
  });
});

Deno.test("plain HTTP/1.1: GET, POST and pipelined requests left at every stage", async () => {
  await withAbruptEdge("plain", async (t, targets) => {
    const list = http1Scenarios("plain").filter((s) => /GET|POST|pipelined/.test(s.name));
    await leaveAndStand(t, targets, "plain", list);
  });
});

Deno.test("passthrough: a client leaving at every stage, and a backend that resets", async () => {
  await withAbruptEdge("plain", async (t, targets) => {
    await leaveAndStand(t, targets, "plain", passthroughScenarios());
  });
});

Deno.test("TLS: HTTP/1.1 (upgrades and tunnels too), handshakes and HTTP/2 left at every stage", async () => {
  await withAbruptEdge("tls", async (t, targets) => {
    await leaveAndStand(t, targets, "tls", [...http1Scenarios("tls"), ...tlsScenarios()]);
  });
});
