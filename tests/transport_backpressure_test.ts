/**
 * A stream through the hub's transports is paced end to end. On Deno 2.9.6 a paused `node:tls`
 * socket went on reading its TCP socket into memory (src/egress/tls_reads.ts), so an edge sending
 * to a destination that did not read had the hub take everything it sent: measured in process,
 * 864 MB in 3 s through a relay-shaped pipe. Against a real hub under its derived flags, through
 * each transport, with the edge's own dial:
 * - a SOCKS connection to a destination that accepts and never reads gets no more taken than the
 *   buffers along the way hold, and the hub's memory stays bounded;
 * - an edge that stops reading a destination that sends as fast as it can (a download to a slow
 *   client) holds the whole way back: the destination gets no more out than those buffers.
 */
import assert from "node:assert/strict";
import type { Socket } from "node:net";
import { boundedTest } from "./fixtures/bounded_test.ts";
import { freePorts } from "./fixtures/gateway.ts";
import { TransportFleet, type TransportKind } from "./fixtures/transport_fleet.ts";

/** What the edge offers: more than every buffer on the way. */
const OFFERED = 128 * 1024 * 1024;
/** The most the way may take while the destination reads nothing (kernel and stream buffers). */
const TAKEN_BOUND = 48 * 1024 * 1024;

/** A destination that accepts connections and never reads them. */
function deafDestination(): { port: number; close(): void } {
  const [port] = freePorts(1);
  const listener = Deno.listen({ hostname: "127.0.0.1", port });
  const conns: Deno.Conn[] = [];
  (async () => {
    for await (const conn of listener) conns.push(conn);
  })().catch(() => {});
  return {
    port,
    close() {
      listener.close();
      for (const conn of conns) conn.close();
    },
  };
}

/** A destination that sends to every connection as fast as it is taken, counting what it sent. */
function loudDestination(): { port: number; sent(): number; close(): void } {
  const [port] = freePorts(1);
  const listener = Deno.listen({ hostname: "127.0.0.1", port });
  const conns: Deno.Conn[] = [];
  let sent = 0;
  (async () => {
    for await (const conn of listener) {
      conns.push(conn);
      (async () => {
        const chunk = new Uint8Array(64 * 1024);
        while (sent < OFFERED) sent += await conn.write(chunk);
      })().catch(() => {});
    }
  })().catch(() => {});
  return {
    port,
    sent: () => sent,
    close() {
      listener.close();
      for (const conn of conns) conn.close();
    },
  };
}

/** Writes 64 KiB chunks, each once the last was taken, until OFFERED or 1 s without progress. */
function writeUntilStalled(socket: Socket): Promise<number> {
  return new Promise((resolve) => {
    let taken = 0;
    let stall = setTimeout(() => resolve(taken), 1000);
    const next = () => {
      if (taken >= OFFERED) {
        clearTimeout(stall);
        return resolve(taken);
      }
      socket.write(new Uint8Array(64 * 1024), (error) => {
        if (error) return;
        taken += 64 * 1024;
        clearTimeout(stall);
        stall = setTimeout(() => resolve(taken), 1000);
        next();
      });
    };
    next();
  });
}

/** The hub's memory bound: what it holds, not what it has yet to collect. */
const HELD_BOUND = 64 * 1024 * 1024;

/**
 * How much the hub's RSS grew over `before`, read until it is under the bound or 3 s have passed
 * (the smallest reading): on a loaded machine the collector runs late, and garbage the hub will
 * free is not memory it holds. A hub that holds what it took stays above the bound throughout.
 */
async function settledGrowth(rss: () => Promise<number>, before: number): Promise<number> {
  const deadline = Date.now() + 3000;
  let least = Infinity;
  for (;;) {
    least = Math.min(least, (await rss()) - before);
    if (least < HELD_BOUND || Date.now() >= deadline) return least;
    await new Promise((resolve) => setTimeout(resolve, 250));
  }
}

for (const kind of ["socks5_tls", "https_tunnel"] as const satisfies readonly TransportKind[]) {
  boundedTest(
    `${kind}: an edge sending to a destination that does not read is paced, and the hub holds a bounded amount`,
    async () => {
      const fleet = await TransportFleet.start();
      const destination = deafDestination();
      try {
        const edge = await fleet.enrol("edge-1");
        const socket = await fleet.dial(kind, edge, { host: "127.0.0.1", port: destination.port });
        socket.on("error", () => {});
        const before = await fleet.rss();
        const taken = await writeUntilStalled(socket);
        const grew = await settledGrowth(() => fleet.rss(), before);
        const report = `${taken >> 20} MB taken; hub RSS grew ${grew >> 20} MB`;
        assert.ok(taken < TAKEN_BOUND, report);
        assert.ok(grew < HELD_BOUND, report);
        socket.destroy();
      } finally {
        destination.close();
        await fleet.dispose();
      }
    },
    90_000,
  );
}

for (const kind of ["socks5_tls", "https_tunnel"] as const satisfies readonly TransportKind[]) {
  boundedTest(
    `${kind}: an edge that stops reading holds the way back to a destination that sends`,
    async () => {
      const fleet = await TransportFleet.start();
      const destination = loudDestination();
      try {
        const edge = await fleet.enrol("edge-1");
        const socket = await fleet.dial(kind, edge, { host: "127.0.0.1", port: destination.port });
        socket.on("error", () => {});
        socket.pause();
        let last = -1;
        while (destination.sent() !== last) { // until the destination is held
          last = destination.sent();
          await new Promise((resolve) => setTimeout(resolve, 1000));
        }
        assert.ok(last < TAKEN_BOUND, `${last >> 20} MB sent to an edge that reads nothing`);
        socket.destroy();
      } finally {
        destination.close();
        await fleet.dispose();
      }
    },
    90_000,
  );
}
