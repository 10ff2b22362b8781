/**
 * Proof 17 — ready means able to serve. Real `main.ts hub`, remote-mode and local-mode `main.ts
 * serve`, and `main.ts` door processes, each under the flags its `flags` command prints, on
 * loopback. What a load balancer polling readiness sees, beside what a user sees:
 *
 * - a remote edge started with no cache while its hub is down answers `/readyz` 503 naming
 *   `hub_unreachable` and since when (and `/v1/health` says the same) while every host is 421;
 *   once the hub serves a set it is 200 and the host is served; when the hub goes away again it
 *   stays 200 — the last good set is served — and a restart with the hub still away is ready at
 *   once from its verified cache;
 * - a remote edge whose hub's only set is refused here is 503 `set_rejected` until a set it takes;
 * - a door with no cached view and no hub is 503 on its health listener's `/readyz` while every
 *   slug gets the cover, and 200 once the hub's view is held and the slug redirects;
 * - a local edge whose tenants folder holds no tenant is 503 `no_tenants` (every host 421) until a
 *   tenant file arrives, and 200 from the start under `readiness.empty_tenants: ready`.
 *
 * On the main issue 34 started from, the first remote edge answered `/readyz` 200 with 0 tenants
 * and 421 for every host for as long as the hub stayed away.
 *
 * @module
 */
import assert from "node:assert/strict";
import { stringify } from "yaml";
import { boundedTest } from "../tests/fixtures/bounded_test.ts";
import {
  derivedFlags,
  freePorts,
  Gateway,
  MAIN,
  proofConfig,
  writeConfig,
} from "../tests/fixtures/gateway.ts";
import { json, type RawResponse, request } from "../tests/fixtures/http_client.ts";
import {
  disposeAll,
  edgeStatus,
  getFrom,
  HubProcess,
  startRemoteEdge,
  tenantText,
} from "../tests/fixtures/hub.ts";
import { waitFor } from "../tests/fixtures/in_process.ts";
import { ask, COVER, SAYS, startDoorHub } from "../tests/fixtures/door.ts";

const LIMIT_MS = 60_000;
const SITE = { "site.test.yaml": tenantText("site.test", "hello") };

/** A `/readyz` 503 body. */
interface NotReady {
  readonly error: {
    readonly code: string;
    readonly reasons: readonly { code: string; message: string; since?: string }[];
  };
}

/** The reason codes of a readiness answer (none for a 200). */
function codes(response: RawResponse): string[] {
  if (response.status === 200) return [];
  return json<NotReady>(response).error.reasons.map((r) => r.code);
}

/** `/readyz` on an edge's local_health lane. */
function readyz(edge: Gateway): Promise<RawResponse> {
  return request(edge.ports.local_health, { path: "/readyz" });
}

/** `/v1/health`'s readiness fields. */
async function health(edge: Gateway): Promise<{ ready: boolean; reasons: { code: string }[] }> {
  return json(await request(edge.ports.local_health, { path: "/v1/health" }));
}

/** `/v1/config`'s `hub.unreachable_since`: when the hub stopped answering, or null. */
async function outageSince(edge: Gateway): Promise<string | null> {
  const { hub } = await edgeStatus(edge);
  return (hub as unknown as { unreachable_since: string | null }).unreachable_since;
}

boundedTest(
  "proof 17: a remote edge with no cache and no hub is not ready and says why; ready once the hub serves",
  async () => {
    const hub = await HubProcess.write({ runtime: SITE });
    let edge: Gateway | undefined;
    try {
      edge = await startRemoteEdge(hub, "edge-a");
      const gateway = edge;
      // Not ready, and why: the hub has not answered since the first failed poll.
      const down = await waitFor(
        () => readyz(gateway),
        (r) => codes(r).includes("hub_unreachable"),
      );
      assert.equal(down.status, 503, down.body);
      const { error } = json<NotReady>(down);
      assert.equal(error.code, "not_ready");
      assert.deepEqual(codes(down), ["hub_unreachable"]);
      const since = Date.parse(error.reasons[0].since ?? "");
      assert.ok(since <= Date.now(), error.reasons[0].since);
      assert.match(error.reasons[0].message, /has not answered since/);
      assert.doesNotMatch(down.body, /portcullis/i, "the body does not name the product");
      const seen = await health(gateway);
      assert.equal(seen.ready, false);
      assert.deepEqual(seen.reasons.map((r) => r.code), ["hub_unreachable"]);
      assert.equal((await getFrom(gateway, "site.test")).status, 421, "what a user would get");

      // The hub arrives: its set is received, checked and live — ready, and the host is served.
      await hub.restart();
      const ready = await waitFor(() => readyz(gateway), (r) => r.status === 200, 10_000);
      assert.equal(ready.body, '{"ready":true}');
      assert.deepEqual(
        [(await getFrom(gateway, "site.test")).status, (await getFrom(gateway, "site.test")).body],
        [200, "hello"],
      );
      assert.deepEqual(await health(gateway).then((h) => [h.ready, h.reasons]), [true, []]);
      assert.equal(await outageSince(gateway), null, "the hub answered: the outage is over");

      // The hub goes away again: the last good set is served, so the edge stays ready.
      await hub.kill();
      await waitFor(() => edgeStatus(gateway), (s) => !s.hub.connected, 10_000);
      assert.ok(await outageSince(gateway), "/v1/config says since when the hub is away");
      assert.equal((await readyz(gateway)).status, 200);
      assert.equal((await getFrom(gateway, "site.test")).status, 200);

      // A restart with the hub still away: ready at once, from the verified cache.
      await gateway.stop();
      edge = await Gateway.start(gateway.dir, gateway.ports);
      const again = await readyz(edge);
      assert.equal(again.status, 200, again.body);
      assert.equal((await edgeStatus(edge)).source, "cache");
      assert.equal((await getFrom(edge, "site.test")).status, 200);
    } finally {
      await disposeAll(edge, hub);
    }
  },
  LIMIT_MS,
);

boundedTest(
  "proof 17: a remote edge whose hub's only set is refused here is not ready (set_rejected) until one is taken",
  async () => {
    // The edge has no egress: a proxy route cannot leave it, so it refuses the hub's set.
    const far = stringify({
      host: "far.test",
      routes: [{ match: { path: "/" }, proxy: { backends: [{ url: "http://10.9.9.9:80" }] } }],
    });
    const hub = await HubProcess.start({ runtime: { "far.test.yaml": far } });
    let edge: Gateway | undefined;
    try {
      edge = await startRemoteEdge(hub, "edge-b");
      const gateway = edge;
      const refused = await waitFor(
        () => readyz(gateway),
        (r) => codes(r).includes("set_rejected"),
        10_000,
      );
      assert.equal(refused.status, 503);
      assert.deepEqual(codes(refused), ["set_rejected"]);
      assert.equal((await getFrom(gateway, "far.test")).status, 421);
      await hub.swap(SITE, ["far.test.yaml"]);
      await waitFor(() => readyz(gateway), (r) => r.status === 200, 10_000);
      assert.equal((await getFrom(gateway, "site.test")).status, 200);
    } finally {
      await disposeAll(edge, hub);
    }
  },
  LIMIT_MS,
);

/** A door subprocess under its derived flags, following `hubUrl`; its folder and ports. */
async function startDoorProcess(hubUrl: string, token: string) {
  const dir = await Deno.makeTempDir({ prefix: "portcullis-door-" });
  const [port, healthPort] = freePorts(2);
  await Deno.writeTextFile(`${dir}/cover.html`, COVER);
  await Deno.writeTextFile(`${dir}/door.token`, token, { mode: 0o600 });
  await Deno.chmod(`${dir}/door.token`, 0o600);
  await Deno.writeTextFile(
    `${dir}/door.yaml`,
    stringify({
      role: "door",
      node_id: "door-1",
      listen: [{ hostname: "127.0.0.1", port }],
      cover_file: "cover.html",
      health: { listen: [{ hostname: "127.0.0.1", port: healthPort }] },
      hub: { url: hubUrl, token_file: "door.token", backoff_initial_ms: 50, backoff_max_ms: 300 },
      cache_dir: "cache",
    }),
  );
  const flags = await derivedFlags(`${dir}/door.yaml`);
  const child = new Deno.Command(Deno.execPath(), {
    args: ["run", "--no-prompt", ...flags, MAIN, "serve", `${dir}/door.yaml`],
    stdout: "null",
    stderr: "null",
    stdin: "null",
  }).spawn();
  const readyz = () => request(healthPort, { path: "/readyz" });
  await waitFor(() => readyz().catch(() => undefined), (r) => r !== undefined, 20_000);
  return {
    port,
    readyz,
    /** Rewrites the token file (read at each poll) to `text`. */
    token: (text: string) => Deno.writeTextFile(`${dir}/door.token`, text, { mode: 0o600 }),
    async dispose() {
      child.kill("SIGTERM");
      await child.status;
      await Deno.remove(dir, { recursive: true }).catch(() => {});
    },
  };
}

boundedTest(
  "proof 17: a door with no cached view and no hub is not ready; ready once the hub's view is held",
  async () => {
    const [hubPort] = freePorts(1);
    const token = crypto.randomUUID();
    const door = await startDoorProcess(`http://127.0.0.1:${hubPort}`, token);
    let hub: Awaited<ReturnType<typeof startDoorHub>> | undefined;
    try {
      const down = await waitFor(() => door.readyz(), (r) => codes(r).includes("hub_unreachable"));
      assert.equal(down.status, 503);
      assert.deepEqual(codes(down), ["hub_unreachable"]);
      assert.doesNotMatch(down.body, /portcullis/i);
      assert.deepEqual([(await ask(door.port, "/ready-slug-01")).body], [COVER], "a slug: cover");

      hub = await startDoorHub({
        mirrors: [{ host: "one.example", region: "DE" }],
        slugs: [{ slug: "ready-slug-01", strategy: "first", mirrors: ["one.example"] }],
        port: hubPort,
      });
      // The test hub's token is its own: the door's file is rewritten to it (read at each poll).
      await door.token(hub.token);
      hub.client.set("one.example", SAYS.live);
      await hub.service.probeNow();
      await waitFor(() => door.readyz(), (r) => r.status === 200, 10_000);
      const hit = await ask(door.port, "/ready-slug-01");
      assert.equal(hit.status, 302);
      assert.equal(hit.headers.get("location"), "https://one.example/");
    } finally {
      await disposeAll(door, hub);
    }
  },
  LIMIT_MS,
);

boundedTest(
  "proof 17: a local edge with an empty tenants folder is not ready by default, ready by setting",
  async () => {
    const ports = { public: 0, local_health: 0, provider_health: 0 };
    [ports.public, ports.local_health] = freePorts(2);
    const empty = await writeConfig(
      proofConfig(ports, { runtime: { watch: true, debounce_ms: 50 } }),
      [],
    );
    let edge: Gateway | undefined;
    let ready: Gateway | undefined;
    try {
      edge = await Gateway.start(empty, ports);
      const gateway = edge;
      const none = await readyz(gateway);
      assert.equal(none.status, 503, none.body);
      assert.deepEqual(codes(none), ["no_tenants"]);
      assert.deepEqual((await health(gateway)).reasons.map((r) => r.code), ["no_tenants"]);
      assert.equal((await getFrom(gateway, "site.test")).status, 421);
      await Deno.writeTextFile(`${empty.dir}/tenants/site.test.yaml`, SITE["site.test.yaml"]);
      await waitFor(() => readyz(gateway), (r) => r.status === 200, 10_000);
      assert.equal((await getFrom(gateway, "site.test")).status, 200);

      const other = { public: 0, local_health: 0, provider_health: 0 };
      [other.public, other.local_health] = freePorts(2);
      const dir = await writeConfig(
        proofConfig(other, { readiness: { empty_tenants: "ready" } }),
        [],
      );
      ready = await Gateway.start(dir, other);
      assert.equal((await readyz(ready)).status, 200);
    } finally {
      await disposeAll(edge, ready);
    }
  },
  LIMIT_MS,
);
