/**
 * Issue 31, finding 3 (the transports): a door's certificate relayed SOCKS through both
 * `socks5_tls` and `https_tunnel` to the pool, because the relay and the tunnel asked `api.nodes`
 * only — and a door must be listed there to follow its own stream. Against a real hub under its
 * derived flags, with the fleet CA: a node registered as a door, and an edge that `doors.nodes`
 * lists, are both listed in `api.nodes` and are both refused on both transports before any byte
 * reaches the pool, while an edge goes through.
 */
import assert from "node:assert/strict";
import { boundedTest } from "./fixtures/bounded_test.ts";
import { getOver, TransportFleet, type TransportKind } from "./fixtures/transport_fleet.ts";
import { UpstreamFixture } from "./fixtures/upstream.ts";

const KINDS: readonly TransportKind[] = ["socks5_tls", "https_tunnel"];

boundedTest(
  "transports: a door's certificate is refused by the relay and the tunnel, whatever api.nodes and doors.nodes say",
  async () => {
    const upstream = await UpstreamFixture.start();
    const fleet = await TransportFleet.start({
      apiNodes: ["edge-1", "door-1", "edge-2"],
      doorNodes: ["edge-2"],
    });
    try {
      const edge = await fleet.enrol("edge-1");
      const door = await fleet.enrol("door-1", "door");
      const listedAsDoor = await fleet.enrol("edge-2");
      const target = { host: "127.0.0.1", port: upstream.port };
      for (const kind of KINDS) {
        const socket = await fleet.dial(kind, edge, target);
        assert.deepEqual(await getOver(socket, `/echo?${kind}=edge`), { status: 200 }, kind);
        socket.destroy();
        for (const node of [door, listedAsDoor]) {
          await assert.rejects(
            fleet.dial(kind, node, target),
            `${kind} refuses ${node.nodeId}`,
          );
        }
      }
      assert.equal(fleet.pool.accepted, 2, "the pool saw the edge's two connections, nothing else");
      assert.deepEqual(upstream.seen.map((s) => s.url), [
        "/echo?socks5_tls=edge",
        "/echo?https_tunnel=edge",
      ]);
    } finally {
      await fleet.dispose();
      await upstream.stop();
    }
  },
  90_000,
);
