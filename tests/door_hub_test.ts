/**
 * A door against a real hub with the fleet CA: it registers as a door with a one-time secret,
 * renews its certificate when due, follows `/v1/doors/stream` by certificate and sends a slug to a
 * mirror; the hub never gives a
 * door the tenant set (backends, onion addresses) nor an edge the door stream; and `hub revoke`
 * stops the door after its grace, its cached view deleted.
 */
import assert from "node:assert/strict";
import { stringify } from "yaml";
import { boundedTest } from "./fixtures/bounded_test.ts";
import { type FleetHub, startFleetHub } from "./fixtures/fleet.ts";
import { freePorts } from "./fixtures/gateway.ts";
import { ask, COVER, eventually } from "./fixtures/door.ts";
import { parseYaml } from "../src/config/yaml_file.ts";
import { loadDoorConfig } from "../src/door/config.ts";
import { type Door, startDoor } from "../src/door/door.ts";
import { revokeNode } from "../src/trust/crl.ts";

const SLUG = "garden-path-0123";

/** A hub serving one mirror and one slug to doors. */
async function doorHub(): Promise<FleetHub> {
  const dir = await Deno.makeTempDir({ prefix: "portcullis-mirrors-" });
  await Deno.mkdir(`${dir}/mirrors`);
  await Deno.writeTextFile(
    `${dir}/mirrors/mirror-one.example.yaml`,
    stringify({ host: "mirror-one.example", region: "NL" }),
  );
  await Deno.writeTextFile(
    `${dir}/slugs.yaml`,
    stringify({ slugs: [{ slug: SLUG, strategy: "first" }] }),
  );
  const fleet = await startFleetHub({
    holdMs: 10_000,
    // The door renews right after it registers (renew_before_days 400 below): no limit here.
    renewBeforeDays: 400,
    renewIntervalSeconds: 0,
    edit(config) {
      config.doors = { mirrors_dir: `${dir}/mirrors`, slugs_file: `${dir}/slugs.yaml` };
    },
  });
  const dispose = fleet.dispose;
  return { ...fleet, dispose: () => dispose().then(() => Deno.remove(dir, { recursive: true })) };
}

/** Boots a door that registers with `fleet` as `door-1` (grace 1 s). */
async function registeringDoor(
  fleet: FleetHub,
): Promise<{ door: Door; dir: string; port: number }> {
  const dir = await Deno.makeTempDir({ prefix: "portcullis-door-" });
  const [port, healthPort] = freePorts(2);
  await Deno.writeTextFile(`${dir}/cover.html`, COVER);
  await Deno.writeTextFile(`${dir}/hub-ca.pem`, fleet.rootPem);
  await Deno.copyFile(await fleet.secretFile("door-1", "door"), `${dir}/door.secret`);
  await Deno.chmod(`${dir}/door.secret`, 0o600);
  const text = stringify({
    role: "door",
    node_id: "door-1",
    listen: [{ hostname: "127.0.0.1", port }],
    cover_file: "cover.html",
    health: { listen: [{ hostname: "127.0.0.1", port: healthPort }] },
    hub: {
      url: fleet.test.url,
      ca_file: "hub-ca.pem",
      cert_file: "door.crt",
      key_file: "door.key",
      register: { secret_file: "door.secret" },
      backoff_initial_ms: 20,
      backoff_max_ms: 200,
      grace_seconds: 1,
      renew_before_days: 400, // a 365-day certificate is due at once: renewed right after registering
    },
    cache_dir: "cache",
  });
  await Deno.writeTextFile(`${dir}/door.yaml`, text);
  const source = parseYaml(`${dir}/door.yaml`, text);
  if (Array.isArray(source)) throw new Error("unparsable door config");
  const door = await startDoor(loadDoorConfig(source), { log: () => {} });
  return { door, dir, port };
}

boundedTest(
  "door and hub: registered as a door, it gets mirrors and slugs, never tenants",
  async () => {
    const fleet = await doorHub();
    let started: Awaited<ReturnType<typeof registeringDoor>> | undefined;
    try {
      started = await registeringDoor(fleet);
      const { port, dir } = started;
      await eventually(
        "a 302 to the mirror",
        async () => (await ask(port, `/${SLUG}`)).status === 302,
      );
      const hit = await ask(port, `/${SLUG}/x`);
      assert.equal(hit.headers.get("location"), "https://mirror-one.example/");
      assert.equal((await ask(port, "/nothing-here")).body, COVER);
      assert.ok(fleet.test.lines.some((l) => /registered door door-1/.test(l)));
      // The door's own record: the new pair is on disk (the hub's log line comes before the writes).
      await eventually("the renewal", () => {
        const renewal = started!.door.status().renewal as { outcome?: string } | null;
        return renewal?.outcome === "renewed";
      });
      assert.ok(fleet.test.lines.some((l) => /renewed door-1/.test(l)));
      await eventually(
        "a 302 after the renewal",
        async () => (await ask(port, `/${SLUG}`)).status === 302,
      );

      // The door's certificate opens the door stream only; an edge's, the tenant stream only.
      const asDoor = fleet.client({
        keyPem: await Deno.readTextFile(`${dir}/door.key`),
        chainPem: await Deno.readTextFile(`${dir}/door.crt`),
      });
      const asEdge = fleet.client(await fleet.enrol("edge-1"));
      try {
        const tenants = await fleet.poll("door-1", asDoor);
        assert.equal(tenants.status, 403);
        assert.equal(tenants.body.error.code, "node_not_allowed");
        const url = new URL("/v1/doors/stream?node_id=edge-1&have=&wait=0", fleet.test.url);
        const stream = await fetch(url, { client: asEdge });
        assert.equal(stream.status, 403);
        assert.equal((await stream.json()).error.code, "node_not_allowed");
        assert.equal((await fleet.poll("edge-1", asEdge)).status, 200);
      } finally {
        asDoor.close();
        asEdge.close();
      }

      // Revoked: after its grace the door stops, its cached view gone.
      await revokeNode(fleet.files.dir, "door-1", "keyCompromise");
      await fleet.test.hub.lookForRevocations();
      assert.equal(await started.door.finished, "revoked");
      await eventually("the public listener closed", async () => {
        try {
          (await Deno.connect({ hostname: "127.0.0.1", port })).close();
          return false;
        } catch {
          return true;
        }
      });
      const left = [...Deno.readDirSync(`${dir}/cache`)].map((e) => e.name);
      assert.deepEqual(left, ["revoked.json"]);
    } finally {
      await started?.door.close();
      await fleet.dispose();
      if (started) await Deno.remove(started.dir, { recursive: true });
    }
  },
  30_000,
);
