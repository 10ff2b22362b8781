/**
 * The hub remembers (issue 34): a hub restarted after its prober judged the mirrors answers a door
 * with the verdicts it had — not `unknown`, which made a door send readers to any mirror, the
 * blocked ones included — and a damaged results file is refused with one line naming it while the
 * hub serves on. A door whose hub is gone keeps sending readers to the live mirror, and does so
 * again after its own restart, from its verified cache. Real processes under the flags
 * `main.ts flags` derives; check-host.net is a local double (fixtures/check_host_double.ts).
 */
import assert from "node:assert/strict";
import { stringify } from "yaml";
import { boundedTest } from "./fixtures/bounded_test.ts";
import { CheckHostDouble } from "./fixtures/check_host_double.ts";
import { parseDiag } from "./fixtures/diag_lines.ts";
import { COVER } from "./fixtures/door.ts";
import { derivedFlags, freePorts } from "./fixtures/gateway.ts";
import { eventually, ServedProcess } from "./fixtures/served_process.ts";
import { encodeResults, RESULTS_FILE } from "../src/hub/mirrors/remembered.ts";

const MAIN = new URL("../main.ts", import.meta.url).pathname;
const SLUG = "garden-path-0123";
/** The slug lists the blocked mirror first: a door that cannot tell them apart sends there. */
const MIRRORS = ["blocked.example", "live.example"];

/** A hub folder serving two mirrors to door-1, probing them from two regions. */
class HubFolder {
  readonly token = crypto.randomUUID();
  readonly apiPort: number;
  readonly healthPort: number;
  readonly stateFile: string;
  flags: string[] = [];
  process: ServedProcess | undefined;

  constructor(readonly dir: string, readonly double: CheckHostDouble) {
    [this.apiPort, this.healthPort] = freePorts(2);
    this.stateFile = `${dir}/doors-state/${RESULTS_FILE}`;
  }

  static async write(double: CheckHostDouble): Promise<HubFolder> {
    const hub = new HubFolder(await Deno.makeTempDir({ prefix: "portcullis-remember-" }), double);
    const { dir } = hub;
    for (const folder of ["runtime", "tokens", "mirrors"]) await Deno.mkdir(`${dir}/${folder}`);
    await Deno.writeTextFile(`${dir}/runtime/globals.yaml`, "{}\n");
    await Deno.writeTextFile(`${dir}/tokens/door-1.token`, `${hub.token}\n`, { mode: 0o600 });
    await Deno.chmod(`${dir}/tokens/door-1.token`, 0o600);
    for (const host of MIRRORS) {
      await Deno.writeTextFile(`${dir}/mirrors/${host}.yaml`, stringify({ host, region: "NL" }));
    }
    await Deno.writeTextFile(
      `${dir}/slugs.yaml`,
      stringify({ slugs: [{ slug: SLUG, strategy: "first", mirrors: MIRRORS }] }),
    );
    await Deno.writeTextFile(
      `${dir}/hub.yaml`,
      stringify({
        role: "hub",
        node_id: "hub-1",
        runtime_dir: "runtime",
        api: { listen: [{ hostname: "127.0.0.1", port: hub.apiPort }], tokens_dir: "tokens" },
        health: { listen: [{ hostname: "127.0.0.1", port: hub.healthPort }] },
        stream: { hold_ms: 5000, history: 8 },
        doors: {
          mirrors_dir: "mirrors",
          slugs_file: "slugs.yaml",
          nodes: ["door-1"],
          prober: {
            enabled: true,
            interval_ms: 60_000,
            regions: ["de1", "ir1"],
            timeout_ms: 20_000,
          },
        },
      }),
    );
    hub.flags = await derivedFlags(`${dir}/hub.yaml`);
    return hub;
  }

  /** Starts the hub under its derived flags, reaching check-host.net through the double. */
  async start(): Promise<ServedProcess> {
    const hub = new ServedProcess(
      Deno.execPath(),
      ["run", "--no-prompt", ...this.flags, MAIN, "hub", `${this.dir}/hub.yaml`],
      { env: this.double.env },
    );
    this.process = hub;
    await hub.line(/hub ready/);
    return hub;
  }

  /** One unheld poll of the door stream as door-1: each mirror's verdict and checked_at. */
  async doorView(): Promise<Record<string, { verdict: string; checked_at: string | null }>> {
    const url = `http://127.0.0.1:${this.apiPort}/v1/doors/stream?node_id=door-1&have=&wait=0`;
    const response = await fetch(url, { headers: { authorization: `Bearer ${this.token}` } });
    assert.equal(response.status, 200);
    const answer = await response.json();
    assert.equal(answer.type, "snapshot");
    return Object.fromEntries(
      answer.view.mirrors.map((m: { host: string; verdict: string; checked_at: string | null }) => [
        m.host,
        { verdict: m.verdict, checked_at: m.checked_at },
      ]),
    );
  }

  /** Waits until the prober judged both mirrors and the results file holds both. */
  async judged(): Promise<void> {
    const done = await eventually(async () => {
      const view = await this.doorView();
      if (view["live.example"].verdict !== "live") return false;
      if (view["blocked.example"].verdict !== "blocked") return false;
      const text = await Deno.readTextFile(this.stateFile).catch(() => "");
      return MIRRORS.every((host) => text.includes(`"${host}"`));
    }, 40_000);
    assert.ok(done, `the mirrors were not judged:\n${this.process?.stderr}`);
  }

  async dispose(): Promise<void> {
    await this.process?.dispose();
    await Deno.remove(this.dir, { recursive: true }).catch(() => {});
  }
}

/** A door process following `hub` as door-1 under its derived flags; `dir` keeps its cache. */
async function startDoor(
  hub: HubFolder,
  dir: string,
): Promise<{ door: ServedProcess; port: number }> {
  const [port, healthPort] = freePorts(2);
  await Deno.writeTextFile(`${dir}/cover.html`, COVER);
  await Deno.writeTextFile(`${dir}/door.token`, hub.token, { mode: 0o600 });
  await Deno.chmod(`${dir}/door.token`, 0o600);
  await Deno.writeTextFile(
    `${dir}/door.yaml`,
    stringify({
      role: "door",
      node_id: "door-1",
      listen: [{ hostname: "127.0.0.1", port }],
      cover_file: "cover.html",
      health: { listen: [{ hostname: "127.0.0.1", port: healthPort }] },
      hub: {
        url: `http://127.0.0.1:${hub.apiPort}`,
        token_file: "door.token",
        backoff_initial_ms: 50,
        backoff_max_ms: 500,
      },
      cache_dir: "cache",
    }),
  );
  const flags = await derivedFlags(`${dir}/door.yaml`);
  const door = new ServedProcess(Deno.execPath(), [
    "run",
    "--no-prompt",
    ...flags,
    MAIN,
    "serve",
    `${dir}/door.yaml`,
  ]);
  await door.line(/door ready/);
  return { door, port };
}

/** Where the door sends a reader of the slug (its Location), or its status when no 302. */
async function sentTo(port: number): Promise<string> {
  const response = await fetch(`http://127.0.0.1:${port}/${SLUG}`, { redirect: "manual" });
  await response.body?.cancel();
  return response.headers.get("location") ?? String(response.status);
}

/** Runs `body` with a double that judges live.example live and blocked.example blocked. */
async function withJudgedHub(body: (hub: HubFolder) => Promise<void>): Promise<void> {
  const double = await CheckHostDouble.start();
  double.set("live.example", { de1: "ok", ir1: "ok" });
  double.set("blocked.example", { de1: "failed", ir1: "failed" });
  const hub = await HubFolder.write(double);
  try {
    await hub.start();
    await hub.judged();
    await body(hub);
  } finally {
    await hub.dispose();
    await double.dispose();
  }
}

boundedTest(
  "hub restart: the first view a door gets carries the remembered verdicts, not unknown",
  () =>
    withJudgedHub(async (hub) => {
      assert.ok(hub.flags.includes(`--allow-write=${hub.dir}/doors-state`), hub.flags.join(" "));
      const before = await hub.doorView();
      // check-host.net goes away, the hub is killed: nothing can judge the mirrors again.
      hub.double.down();
      await hub.process!.dispose();
      const restarted = await hub.start();
      const after = await hub.doorView();
      assert.deepEqual(after, before);
      assert.equal(after["blocked.example"].verdict, "blocked");
      assert.equal(after["live.example"].verdict, "live");
      assert.match(
        restarted.stderr,
        /remembered probe results of 2 mirrors loaded from \S+doors-state\/probe-results\.json/,
      );
      // A door that first meets the restarted hub sends the reader to the live mirror.
      const doorDir = await Deno.makeTempDir({ prefix: "portcullis-door-" });
      const { door, port } = await startDoor(hub, doorDir);
      try {
        assert.ok(await eventually(async () => (await sentTo(port)) !== "200", 10_000));
        for (let i = 0; i < 3; i++) assert.equal(await sentTo(port), "https://live.example/");
      } finally {
        await door.dispose();
        await Deno.remove(doorDir, { recursive: true });
      }
    }),
  120_000,
);

boundedTest(
  "door with its hub killed keeps sending a slug to the live mirror, also after its own restart",
  () =>
    withJudgedHub(async (hub) => {
      const doorDir = await Deno.makeTempDir({ prefix: "portcullis-door-" });
      let door: ServedProcess | undefined;
      try {
        const first = await startDoor(hub, doorDir);
        door = first.door;
        const live = () => sentTo(first.port).then((to) => to === "https://live.example/");
        assert.ok(await eventually(live, 10_000), door.stderr);
        await hub.process!.dispose();
        await door.line(/hub .*retrying/);
        for (let i = 0; i < 3; i++) assert.equal(await sentTo(first.port), "https://live.example/");
        // Restarted while the hub is away: the verified cache is served.
        await door.dispose();
        const second = await startDoor(hub, doorDir);
        door = second.door;
        assert.match(door.stderr, /serving the cached view/);
        for (let i = 0; i < 3; i++) {
          assert.equal(await sentTo(second.port), "https://live.example/");
        }
      } finally {
        await door?.dispose();
        await Deno.remove(doorDir, { recursive: true });
      }
    }),
  120_000,
);

boundedTest(
  "hub with a damaged results file: one error line naming it, every mirror unknown, the hub serves",
  async () => {
    const double = await CheckHostDouble.start();
    double.down(); // nothing judges the mirrors in this test: only the file could
    const hub = await HubFolder.write(double);
    try {
      const at = Date.now() - 1000;
      const said = new Map([["de1", "ok" as const], ["ir1", "ok" as const]]);
      const good = encodeResults(
        "hub-1",
        new Map(MIRRORS.map((h) => [h, { at, regions: said }])),
        at,
      );
      await Deno.mkdir(`${hub.dir}/doors-state`);
      // One bit of meaning changed on disk: live becomes failed, the checksum left as it was.
      await Deno.writeTextFile(hub.stateFile, good.replace('"ir1": "ok"', '"ir1": "failed"'));
      const started = await hub.start();
      const view = await hub.doorView();
      assert.deepEqual(
        Object.values(view).map((m) => m.verdict),
        ["unknown", "unknown"],
      );
      const refused = started.lines.filter((l) => /remembered probe results .* refused/.test(l));
      assert.equal(refused.length, 1, started.stderr);
      assert.ok(refused[0].includes(hub.stateFile), refused[0]);
      assert.match(refused[0], /SHA-256 does not match/);
      const health = await fetch(`http://127.0.0.1:${hub.healthPort}/v1/config`);
      assert.equal(health.status, 200);
      const status = await health.json();
      assert.equal(status.doors.prober.remembered.at_boot.state, "refused");

      // A foreign file (another hub's, checksum intact) is refused the same way.
      await hub.process!.dispose();
      await Deno.writeTextFile(
        hub.stateFile,
        encodeResults("hub-2", new Map(MIRRORS.map((h) => [h, { at, regions: said }])), at),
      );
      const again = await hub.start();
      const messages = again.lines.map((line) => parseDiag(line)?.msg ?? line).join("\n");
      assert.match(messages, /refused: written by hub "hub-2", not by this hub "hub-1"/);
      assert.deepEqual(Object.values(await hub.doorView()).map((m) => m.verdict), [
        "unknown",
        "unknown",
      ]);
    } finally {
      await hub.dispose();
      await double.dispose();
    }
  },
  60_000,
);
