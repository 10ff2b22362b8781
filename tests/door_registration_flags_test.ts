/**
 * A door registers and renews with the fleet CA under the flags `main.ts flags` derives for it
 * (issue 31: a new operator's door could not register — `Requires write access to
 * "secrets/door-1.key.new"` — because the door's flags, unlike the edge's, did not cover the files
 * registration and renewal write, and the failed attempt had already spent its secret). Real
 * processes: the hub and the door, each under its derived flags.
 */
import assert from "node:assert/strict";
import { stringify } from "yaml";
import { boundedTest } from "./fixtures/bounded_test.ts";
import { COVER } from "./fixtures/door.ts";
import { FleetProcess, SLUG } from "./fixtures/fleet_process.ts";
import { derivedFlags, freePorts } from "./fixtures/gateway.ts";
import { eventually, ServedProcess } from "./fixtures/served_process.ts";

const MAIN = new URL("../main.ts", import.meta.url).pathname;

boundedTest(
  "door flags: a door registers and renews under its derived flags, then serves its slug",
  async () => {
    const fleet = await FleetProcess.start({
      doors: {},
      ca: { renew_before_days: 400, renew_interval_seconds: 0 },
    });
    const dir = await Deno.makeTempDir({ prefix: "portcullis-door-" });
    let door: ServedProcess | undefined;
    try {
      const added = await fleet.addNode("door-1", "door");
      assert.equal(added.code, 0, added.stderr);
      // The layout of the newcomer's report: credentials in secrets/, paths relative.
      await Deno.mkdir(`${dir}/secrets`, { mode: 0o700 });
      await Deno.copyFile(
        `${fleet.files.secretsDir}/door-1.secret`,
        `${dir}/secrets/door-1.secret`,
      );
      await Deno.chmod(`${dir}/secrets/door-1.secret`, 0o600);
      await Deno.writeTextFile(`${dir}/hub-ca.pem`, fleet.rootPem);
      await Deno.writeTextFile(`${dir}/cover.html`, COVER);
      const [port, healthPort] = freePorts(2);
      await Deno.writeTextFile(
        `${dir}/door.yaml`,
        stringify({
          role: "door",
          node_id: "door-1",
          listen: [{ hostname: "127.0.0.1", port }],
          cover_file: "cover.html",
          health: { listen: [{ hostname: "127.0.0.1", port: healthPort }] },
          hub: {
            url: fleet.hub.url,
            ca_file: "hub-ca.pem",
            cert_file: "secrets/door-1.crt",
            key_file: "secrets/door-1.key",
            register: { secret_file: "secrets/door-1.secret" },
            backoff_initial_ms: 50,
            backoff_max_ms: 500,
            renew_before_days: 400, // a 365-day certificate is due at once
          },
          cache_dir: "cache",
        }),
      );
      const flags = await derivedFlags(`${dir}/door.yaml`);
      assert.match(flags.join(" "), /--allow-write=[^ ]*secrets\/door-1\.key\.new/);
      door = new ServedProcess(Deno.execPath(), [
        "run",
        "--no-prompt",
        ...flags,
        MAIN,
        "serve",
        `${dir}/door.yaml`,
      ]);
      await door.line(/registered with the hub as door door-1/);
      await door.line(/door ready/);
      await door.line(/certificate renewed/);
      assert.match(fleet.hub.stderr, /registered door door-1/);
      assert.match(fleet.hub.stderr, /renewed door-1/);
      assert.doesNotMatch(door.stderr, /Requires write access/);
      await assert.rejects(Deno.stat(`${dir}/secrets/door-1.secret`), Deno.errors.NotFound);
      assert.equal((await Deno.stat(`${dir}/secrets/door-1.key`)).mode! & 0o777, 0o600);
      const redirected = await eventually(async () => {
        const response = await fetch(`http://127.0.0.1:${port}/${SLUG}`, { redirect: "manual" });
        await response.body?.cancel();
        return response.status === 302;
      }, 15_000);
      assert.ok(redirected, door.stderr);
    } finally {
      await door?.dispose();
      await fleet.dispose();
      await Deno.remove(dir, { recursive: true });
    }
  },
  60_000,
);
