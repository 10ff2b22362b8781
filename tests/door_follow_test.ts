/**
 * A door following its hub: a change of verdict or of the registry reaches a door whose poll is
 * held, well within the hold; a restarted door serves its cached view while the hub is away; and
 * `node_revoked` ends in a closed door after the grace — cache gone, `revoked.json` written, a
 * reboot refused — unless a registration secret provisions it again.
 *
 * @module
 */
import assert from "node:assert/strict";
import { BootError } from "../src/boot/boot_error.ts";
import { stringify } from "yaml";
import { checkRevocation, type Enrol } from "../src/door/boot.ts";
import { type DoorConfig, loadDoorConfig } from "../src/door/config.ts";
import { startDoor } from "../src/door/door.ts";
import { parseYaml } from "../src/config/yaml_file.ts";
import { freePorts } from "./fixtures/gateway.ts";
import {
  ask,
  doorStatus,
  eventually,
  SAYS,
  startDoorHub,
  startTestDoor,
  type TestDoor,
} from "./fixtures/door.ts";

const MIRRORS = [{ host: "one.example", region: "DE" }, { host: "two.example", region: "NL" }];
const SLUGS = [{
  slug: "follow-slug-01",
  strategy: "first",
  mirrors: ["one.example", "two.example"],
}];

/** Where the door sends `path`: the Location's host, or "cover". */
async function target(door: TestDoor, path: string): Promise<string> {
  const answer = await ask(door.port, path);
  return answer.status === 302 ? new URL(answer.headers.get("location")!).host : "cover";
}

Deno.test("door: a change reaches a door whose poll is held, within one poll", async () => {
  const hub = await startDoorHub({ mirrors: MIRRORS, slugs: SLUGS, holdMs: 20_000 });
  hub.client.set("one.example", SAYS.live);
  hub.client.set("two.example", SAYS.live);
  await hub.service.probeNow();
  const door = await startTestDoor(hub);
  try {
    await eventually("a held poll of a current door", async () =>
      hub.service.feed.waiting === 1 &&
      (await doorStatus(door.healthPort)).view.hash === hub.service.feed.live.hash);
    assert.equal(await target(door, "/follow-slug-01"), "one.example");
    const polls = hub.service.doors.get("door-1")!.polls;

    hub.client.set("one.example", SAYS.blocked);
    await hub.service.probeNow();
    await eventually(
      "the verdict at the door",
      async () => await target(door, "/follow-slug-01") === "two.example",
      3000,
    );
    // One answer per published change (each mirror's result publishes), each to a held poll: no
    // polling storm, and the 20 s hold never had to run out.
    // The count moves when the door's next poll arrives, which on a loaded machine may come a
    // little after the verdict is seen at the door.
    await eventually(
      "the door's next poll",
      () => hub.service.doors.get("door-1")!.polls > polls,
      5000,
    );
    const after = hub.service.doors.get("door-1")!.polls;
    assert.ok(after > polls && after <= polls + 3, `${after - polls} polls for one round`);

    await hub.write(MIRRORS, [...SLUGS, { slug: "added-slug-02", strategy: "first" }]);
    await eventually(
      "the new slug at the door",
      async () => await target(door, "/added-slug-02") === "two.example",
      3000,
    );
  } finally {
    await door.door.close();
    await hub.dispose();
    await Deno.remove(door.dir, { recursive: true });
  }
});

Deno.test("door: a restarted door serves its cached view while the hub is away", async () => {
  const hub = await startDoorHub({ mirrors: MIRRORS, slugs: SLUGS });
  hub.client.set("one.example", SAYS.degraded);
  hub.client.set("two.example", SAYS.live);
  await hub.service.probeNow();
  const first = await startTestDoor(hub);
  await eventually(
    "the view at the door",
    async () => (await doorStatus(first.healthPort)).view.hash === hub.service.feed.live.hash,
  );
  await first.door.close();
  const info = await Deno.stat(`${first.dir}/cache/view.json`);
  assert.equal(info.mode! & 0o777, 0o600);
  await hub.dispose();

  const second = await first.restart();
  try {
    assert.equal(await target(second, "/follow-slug-01"), "two.example");
    const status = await doorStatus(second.healthPort);
    assert.equal(status.view.source, "cache");
    await eventually(
      "a failed poll",
      async () => (await doorStatus(second.healthPort)).stream.failures > 0,
    );
  } finally {
    await second.door.close();
    await Deno.remove(first.dir, { recursive: true });
  }
});

Deno.test("door: node_revoked closes the door after the grace, and a reboot is refused", async () => {
  const hub = await startDoorHub({ mirrors: MIRRORS, slugs: SLUGS });
  hub.client.set("one.example", SAYS.live);
  await hub.service.probeNow();
  const door = await startTestDoor(hub, { graceSeconds: 1 });
  try {
    await eventually(
      "the view at the door",
      async () => (await doorStatus(door.healthPort)).view.hash === hub.service.feed.live.hash,
    );
    const revokedAt = Date.now();
    hub.revoke();
    await eventually(
      "the door to hear of it",
      async () => (await doorStatus(door.healthPort)).state === "revoking",
    );
    assert.equal(
      await target(door, "/follow-slug-01"),
      "one.example",
      "it serves during the grace",
    );
    assert.equal(await door.door.finished, "revoked");
    assert.ok(Date.now() - revokedAt >= 900, "not before the grace");
    await assert.rejects(ask(door.port, "/"), "the public listener is closed");
    const status = await doorStatus(door.healthPort);
    assert.equal(status.state, "revoked");
    assert.match(status.revocation.reason, /\(node_revoked: /);
    await assert.rejects(Deno.stat(`${door.dir}/cache/view.json`), Deno.errors.NotFound);
    const record = JSON.parse(await Deno.readTextFile(`${door.dir}/cache/revoked.json`));
    assert.match(record.reason, /\(node_revoked: /);
    assert.equal((await Deno.stat(`${door.dir}/cache/revoked.json`)).mode! & 0o777, 0o600);
    assert.ok(door.lines.some((l) => l.includes("the hub revoked this node")));
    await door.door.close();

    const reboot = door.restart();
    await assert.rejects(reboot, (error: Error) => {
      assert.ok(error instanceof BootError);
      assert.match(error.message, /The hub revoked this door at .*revoked\.json says so/);
      assert.match(error.message, /Provision it again: give it new credentials/);
      return true;
    });
  } finally {
    await door.door.close();
    await hub.dispose();
    await Deno.remove(door.dir, { recursive: true });
  }
});

Deno.test("checkRevocation() lets a revoked door with a registration secret register again", async () => {
  const dir = await Deno.makeTempDir({ prefix: "portcullis-door-" });
  try {
    await Deno.mkdir(`${dir}/cache`);
    await Deno.writeTextFile(
      `${dir}/cache/revoked.json`,
      '{"at":"then","reason":"node_revoked: x"}',
    );
    await Deno.writeTextFile(`${dir}/door.crt`, "old");
    const config = {
      cacheDir: `${dir}/cache`,
      hub: {
        tls: { caFile: `${dir}/ca.crt`, certFile: `${dir}/door.crt`, keyFile: `${dir}/door.key` },
        register: { secretFile: `${dir}/door.secret` },
      },
    } as unknown as DoorConfig;
    const lines: string[] = [];
    await assert.rejects(
      checkRevocation(config, (l) => lines.push(l)),
      /put a new registration secret/,
    );
    await Deno.writeTextFile(`${dir}/door.secret`, "secret");
    assert.equal(await checkRevocation(config, (l) => lines.push(l)), true);
    await assert.rejects(
      Deno.stat(`${dir}/door.crt`),
      Deno.errors.NotFound,
      "the revoked cert is gone",
    );
    assert.match(lines.join("\n"), /registering again/);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("startDoor() provisions a revoked door again with a registration secret", async () => {
  const dir = await Deno.makeTempDir({ prefix: "portcullis-door-" });
  const [port] = freePorts(1);
  try {
    await Deno.mkdir(`${dir}/cache`);
    await Deno.writeTextFile(
      `${dir}/cache/revoked.json`,
      '{"at":"then","reason":"node_revoked: x"}',
    );
    await Deno.writeTextFile(`${dir}/cover.html`, "cover");
    await Deno.writeTextFile(`${dir}/door.crt`, "revoked certificate");
    const text = stringify({
      role: "door",
      node_id: "door-7",
      listen: [{ hostname: "127.0.0.1", port }],
      cover_file: "cover.html",
      hub: {
        url: "https://127.0.0.1:1",
        ca_file: "ca.crt",
        cert_file: "door.crt",
        key_file: "door.key",
        register: { secret_file: "door.secret" },
      },
      cache_dir: "cache",
    });
    const source = parseYaml(`${dir}/door.yaml`, text);
    if (Array.isArray(source)) throw new Error(JSON.stringify(source));
    const config = loadDoorConfig(source);
    const calls: string[] = [];
    const enrol: Enrol = (options) => {
      calls.push(`${options.nodeType} ${options.nodeId} ${options.hub.secretFile}`);
      return Promise.resolve("none");
    };
    await assert.rejects(
      startDoor(config, { log: () => {}, enrol }),
      /put a new registration secret/,
    );
    assert.deepEqual(calls, [], "no registration without a secret");

    await Deno.writeTextFile(`${dir}/door.secret`, "secret");
    await assert.rejects(startDoor(config, { log: () => {}, enrol }), /no registration secret/);
    assert.deepEqual(calls, [`door door-7 ${dir}/door.secret`]);
    await assert.rejects(
      Deno.stat(`${dir}/door.crt`),
      Deno.errors.NotFound,
      "the revoked one went",
    );
    assert.ok(await Deno.stat(`${dir}/cache/revoked.json`), "kept while registration fails");

    const registering: Enrol = async (options) => {
      await Deno.writeTextFile(options.hub.certFile, "new certificate");
      return "registered";
    };
    await Deno.writeTextFile(
      `${dir}/cache/revoked.json`,
      '{"at":"then","reason":"node_revoked: x"}',
    );
    const door = await startDoor(config, { log: () => {}, enrol: registering });
    try {
      await assert.rejects(Deno.stat(`${dir}/cache/revoked.json`), Deno.errors.NotFound);
      assert.equal((await ask(port, "/anything-at-all")).body, "cover");
    } finally {
      await door.close();
    }
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
