/**
 * A seized edge must lose the way out too, not only the config stream: the hub's SOCKS relay
 * (`transport.socks5_tls`, its client CA the fleet root by default) relays for a registered edge's
 * certificate, and refuses the same certificate once `hub revoke` has put it on the CRL — closing
 * the connection before any byte reaches the pool.
 */
import assert from "node:assert/strict";
import { boundedTest } from "./fixtures/bounded_test.ts";
import { startFleetHub } from "./fixtures/fleet.ts";
import { freePorts } from "./fixtures/gateway.ts";
import { SocksFixture } from "./fixtures/socks5.ts";
import { relayClient } from "./fixtures/socks_hub.ts";
import { revokeNode } from "../src/trust/crl.ts";
import { encodePreamble } from "../src/egress/relay_preamble.ts";

boundedTest(
  "fleet transport: the relay serves a registered edge, and refuses it once revoked",
  async () => {
    const pool = await SocksFixture.start();
    const [relayPort] = freePorts(1);
    const fleet = await startFleetHub({
      edit(config) {
        const { cert_file, key_file } = config.api.tls;
        config.transport = {
          socks5_tls: { listen: { hostname: "127.0.0.1", port: relayPort }, cert_file, key_file },
        };
        config.pool = { socks: [{ hostname: "127.0.0.1", port: pool.port }] };
      },
    });
    try {
      const edge = await fleet.enrol("edge-1");
      const dial = () =>
        relayClient(relayPort, {
          ca: fleet.rootPem,
          cert: edge.chainPem,
          key: edge.keyPem,
          preamble: encodePreamble(pool.port),
        });
      const before = await dial();
      assert.equal(before.handshake, true);
      assert.deepEqual(before.reply, [5, 0], "the pool's double answered the greeting");
      await revokeNode(fleet.files.dir, "edge-1", "keyCompromise");
      await fleet.test.hub.lookForRevocations();
      const after = await dial();
      assert.deepEqual(after.reply, [], "nothing relayed for a revoked certificate");
      assert.equal(fleet.test.hub.relay!.snapshot().refused.node, 1);
    } finally {
      await fleet.dispose();
      await pool.stop();
    }
  },
  20_000,
);
