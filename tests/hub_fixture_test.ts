/**
 * The test hub's own fixture (tests/fixtures/hub.ts): a port the picker handed out but another
 * process took before the hub bound it — a second suite on the same machine — makes the fixture
 * write the hub again on fresh ports, not fail the test that wanted a hub.
 *
 * @module
 */
import assert from "node:assert/strict";
import { HubProcess } from "./fixtures/hub.ts";
import { request } from "./fixtures/http_client.ts";

Deno.test("HubProcess.start() boots again on fresh ports when a picked port was taken", async () => {
  let held: Deno.Listener | undefined;
  let heldPort = 0;
  const hub = await HubProcess.start({
    edit(config) {
      if (held) return; // only the first boot finds its port taken
      const api = config.api as { listen: { port: number }[] };
      heldPort = api.listen[0].port;
      held = Deno.listen({ hostname: "127.0.0.1", port: heldPort });
    },
  });
  try {
    assert.notEqual(heldPort, 0);
    assert.notEqual(hub.apiPort, heldPort);
    const health = await request(hub.healthPort, { path: "/healthz" });
    assert.equal(health.status, 200);
  } finally {
    held?.close();
    await hub.dispose();
  }
});
