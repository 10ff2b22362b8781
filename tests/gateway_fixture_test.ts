/**
 * The subprocess fixture's answer to a port taken between the pick and the gateway's bind (a second
 * suite on the machine): the test takes the picked port itself, the way that other process would,
 * and holds it while the fixture starts the gateway.
 *
 * @module
 */
import assert from "node:assert/strict";
import {
  freePorts,
  Gateway,
  type LanePorts,
  proofConfig,
  writeConfig,
} from "./fixtures/gateway.ts";
import { request } from "./fixtures/http_client.ts";

/** Three picked lane ports, a config naming them, and a listener holding the public one. */
async function takenPublicPort() {
  const [publicPort, localPort, providerPort] = freePorts(3);
  const ports: LanePorts = {
    public: publicPort,
    local_health: localPort,
    provider_health: providerPort,
  };
  const dir = await writeConfig(proofConfig(ports));
  const hold = Deno.listen({ hostname: "127.0.0.1", port: publicPort });
  return { ports, dir, held: publicPort, hold };
}

Deno.test("Gateway.start() boots again on fresh ports when a picked port was taken", async () => {
  const { ports, dir, held, hold } = await takenPublicPort();
  try {
    const gateway = await Gateway.start(dir, ports);
    try {
      assert.notEqual(ports.public, held);
      assert.equal(gateway.ports, ports);
      const config = await Deno.readTextFile(dir.config);
      assert.equal(config.includes(`port: ${held}`), false);
      assert.match(config, new RegExp(`port: ${ports.public}\\b`));
      assert.ok(gateway.flags.some((flag) => flag.includes(`127.0.0.1:${ports.public}`)));
      const home = await request(ports.public, { headers: [["Host", "demo.test"]] });
      assert.equal(home.status, 200);
      assert.equal(home.body, "tenant-home");
      assert.equal((await request(ports.local_health, { path: "/v1/ledger" })).status, 200);
    } finally {
      await gateway.dispose();
    }
  } finally {
    hold.close();
    await Deno.remove(dir.dir, { recursive: true }).catch(() => {});
  }
});

Deno.test("Gateway.start() with one attempt fails naming the address in use", async () => {
  const { ports, dir, held, hold } = await takenPublicPort();
  try {
    await assert.rejects(
      () => Gateway.start(dir, ports, undefined, { attempts: 1 }),
      new RegExp(`127\\.0\\.0\\.1:${held}: address already in use`),
    );
    assert.equal(ports.public, held);
  } finally {
    hold.close();
    await Deno.remove(dir.dir, { recursive: true }).catch(() => {});
  }
});

Deno.test("Gateway.start() never moves a port the caller chose itself", async () => {
  // Port 0 hands out a port the picker never did: the caller's own, taken here.
  const hold = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const held = (hold.addr as Deno.NetAddr).port;
  const [localPort] = freePorts(1);
  const ports: LanePorts = { public: held, local_health: localPort, provider_health: 0 };
  const dir = await writeConfig(proofConfig(ports));
  try {
    await assert.rejects(
      () => Gateway.start(dir, ports),
      new RegExp(`127\\.0\\.0\\.1:${held}: address already in use`),
    );
    assert.deepEqual(ports, { public: held, local_health: localPort, provider_health: 0 });
    assert.match(await Deno.readTextFile(dir.config), new RegExp(`port: ${held}\\b`));
  } finally {
    hold.close();
    await Deno.remove(dir.dir, { recursive: true }).catch(() => {});
  }
});

Deno.test("freePorts() notes every port it hands out where the machine's other test processes look", () => {
  const notes = `${Deno.env.get("TMPDIR") ?? "/tmp"}/portcullis-test-ports`;
  const ports = freePorts(20);
  assert.equal(new Set(ports).size, 20);
  for (const port of ports) {
    assert.equal(Deno.readTextFileSync(`${notes}/${port}`), `${Deno.pid}\n`, `port ${port}`);
    const age = Date.now() - Deno.statSync(`${notes}/${port}`).mtime!.getTime();
    assert.ok(age < 60_000, `port ${port}'s note is fresh`);
  }
});
