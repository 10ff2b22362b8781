/**
 * Issue 31, finding 5: a relay stream and a tunnel stream opened before `hub revoke` still carried
 * new requests to backends after the api answered that node `node_revoked` — the certificate was
 * checked at the handshake only. Against a real hub under its derived flags: an edge's SOCKS
 * connections through both transports (made with the edge's own dial) carry a request, then the
 * operator runs `hub revoke`; within one revocation look both are closed by the hub (the tunnel
 * with 1008), the next request on each gets no answer and never reaches the upstream, and new
 * connections are refused.
 */
import assert from "node:assert/strict";
import type { Socket } from "node:net";
import { WebSocketStream } from "../src/egress/ws_stream.ts";
import { boundedTest } from "./fixtures/bounded_test.ts";
import { getOver, KeptUpstream, TransportFleet } from "./fixtures/transport_fleet.ts";

/** `revocation.reload_ms`: the look the claim is bounded by. */
const RELOAD_MS = 1000;
/** What a loaded machine may add to a look (reading the CRL and the nodes, the recheck). */
const SLACK_MS = 3000;

/** When `socket` closed (ms since the epoch), or never within `ms`. */
function closedAt(socket: Socket, ms: number): Promise<number | "open"> {
  return new Promise((resolve) => {
    if (socket.destroyed) return resolve(Date.now());
    const timer = setTimeout(() => resolve("open"), ms);
    socket.once("close", () => {
      clearTimeout(timer);
      resolve(Date.now());
    });
  });
}

boundedTest(
  "transports: relay and tunnel streams opened before hub revoke are closed within one look and carry no new request",
  async () => {
    const upstream = await KeptUpstream.start();
    const fleet = await TransportFleet.start({ reloadMs: RELOAD_MS });
    try {
      const edge = await fleet.enrol("edge-1");
      const target = { host: "127.0.0.1", port: upstream.port };
      const relay = await fleet.dial("socks5_tls", edge, target);
      const tunnel = await fleet.dial("https_tunnel", edge, target);
      relay.on("error", () => {});
      tunnel.on("error", () => {});
      assert.deepEqual(await getOver(relay, "/echo?relay=before"), { status: 200 });
      assert.deepEqual(await getOver(tunnel, "/echo?tunnel=before"), { status: 200 });

      const relayClosed = closedAt(relay, 30_000);
      const tunnelClosed = closedAt(tunnel, 30_000);
      await fleet.revoke("edge-1");
      const revokedAt = Date.now();
      const [relayAt, tunnelAt] = await Promise.all([relayClosed, tunnelClosed]);
      assert.notEqual(relayAt, "open", "the hub closed the relay stream");
      assert.notEqual(tunnelAt, "open", "the hub closed the tunnel stream");
      for (const at of [relayAt as number, tunnelAt as number]) {
        assert.ok(at - revokedAt <= RELOAD_MS + SLACK_MS, `closed ${at - revokedAt} ms after`);
      }
      assert.ok(tunnel instanceof WebSocketStream);
      assert.equal(tunnel.wsClose?.code, 1008, "the tunnel was closed for policy");

      assert.equal(await getOver(relay, "/echo?relay=after"), "closed");
      assert.equal(await getOver(tunnel, "/echo?tunnel=after"), "closed");
      await assert.rejects(fleet.dial("socks5_tls", edge, target), "a new relay stream");
      await assert.rejects(fleet.dial("https_tunnel", edge, target), "a new tunnel");
      assert.deepEqual(upstream.paths, ["/echo?relay=before", "/echo?tunnel=before"]);
      assert.equal(fleet.pool.open, 0, "no stream of the node is left open at the pool");
    } finally {
      await fleet.dispose();
      await upstream.stop();
    }
  },
  90_000,
);
