/**
 * Readiness that tells the truth (src/live/readiness.ts): which reason each state of a follower's
 * set gives, on both sides of each condition; that a held set stays ready while its refresh fails;
 * the `/readyz` body; and, on in-process edges, a hub that answers with a set that does not check
 * (`set_rejected`, never `hub_unreachable`), a pending set with no earlier one (`set_pending`),
 * and a hub-fed edge whose hub's set holds no tenant.
 *
 * @module
 */
import assert from "node:assert/strict";
import http from "node:http";
import { edgeReasons, readinessReply, setReasons } from "../src/live/readiness.ts";
import { freePorts } from "./fixtures/gateway.ts";
import { json, request } from "./fixtures/http_client.ts";
import { type TestEdge, waitFor } from "./fixtures/in_process.ts";
import { bootRemoteEdge, getHost } from "./fixtures/remote_edge.ts";
import { startTestHub } from "./fixtures/hub_in_process.ts";

const EMPTY = { generation: 0, tenants: 0, emptyTenants: "not_ready" } as const;
const AT = "2026-12-01T10:00:00.000Z";

/** The codes of a list of reasons. */
const codesOf = (reasons: readonly { code: string }[]) => reasons.map((r) => r.code);

Deno.test("setReasons() gives no_set_yet to a follower that holds nothing and has heard nothing", () => {
  assert.deepEqual(codesOf(setReasons({ ...EMPTY, follower: {} })), ["no_set_yet"]);
  assert.deepEqual(
    codesOf(setReasons({ ...EMPTY, follower: { unreachable_since: null, unverified: null } })),
    ["no_set_yet"],
  );
});

Deno.test("setReasons() names the hub unreachable since its first failure, with the error", () => {
  const [reason] = setReasons({
    ...EMPTY,
    follower: { unreachable_since: AT, last_error: { message: "connection refused" } },
  });
  assert.equal(reason.code, "hub_unreachable");
  assert.equal(reason.since, AT);
  assert.match(reason.message, /since 2026-12-01T10:00:00\.000Z: connection refused$/);
});

Deno.test("setReasons() says set_rejected for a refused set and for one that did not check", () => {
  const refused = setReasons({ ...EMPTY, rejection: { at: Date.parse(AT), problems: 2 } });
  assert.deepEqual(codesOf(refused), ["set_rejected"]);
  assert.equal(refused[0].since, AT);
  assert.match(refused[0].message, /2 problems/);
  const unverified = setReasons({
    ...EMPTY,
    follower: { unverified: { at: AT, message: "the received set hashes to 1234" } },
  });
  assert.deepEqual(codesOf(unverified), ["set_rejected"]);
  assert.match(unverified[0].message, /hashes to 1234/);
});

Deno.test("setReasons() says set_pending while the only set waits for the cache folder", () => {
  const pending = { since: AT, last_error: { message: "the cache folder is full" } };
  const reasons = setReasons({ ...EMPTY, follower: { pending, unreachable_since: AT } });
  assert.deepEqual(codesOf(reasons), ["set_pending", "hub_unreachable"]);
  assert.match(reasons[0].message, /cache folder is full/);
});

Deno.test("setReasons() keeps a follower that holds a set ready whatever its refresh says", () => {
  const failing = {
    unreachable_since: AT,
    last_error: { message: "refused" },
    unverified: { at: AT, message: "bad" },
    pending: { since: AT, last_error: { message: "full" } },
  };
  const held = { generation: 1, tenants: 3, emptyTenants: "not_ready" } as const;
  assert.deepEqual(
    setReasons({ ...held, follower: failing, rejection: { at: 0, problems: 1 } }),
    [],
  );
});

Deno.test("setReasons() says no_tenants for a live set without a tenant, unless set to ready", () => {
  const live = { generation: 4, tenants: 0 } as const;
  assert.deepEqual(codesOf(setReasons({ ...live, emptyTenants: "not_ready" })), ["no_tenants"]);
  assert.deepEqual(setReasons({ ...live, emptyTenants: "ready" }), []);
  assert.deepEqual(setReasons({ ...live, tenants: 1, emptyTenants: "not_ready" }), []);
  // A set not yet held is not an empty one: the setting does not make it ready.
  assert.deepEqual(codesOf(setReasons({ ...EMPTY, emptyTenants: "ready" })), ["no_set_yet"]);
});

Deno.test("edgeReasons() puts a drain alone, then boot, lanes down and the set in that order", () => {
  const set = { ...EMPTY, follower: {} };
  const down = [{ lane: "public", workers: 2, live: 0, starting: 1, waiting: 0 }] as const;
  // deno-lint-ignore no-explicit-any
  const lanes = down as any;
  assert.deepEqual(
    codesOf(edgeReasons({ draining: true, armed: false, down: lanes, set })),
    ["draining"],
  );
  assert.deepEqual(
    codesOf(edgeReasons({ draining: false, armed: false, down: lanes, set })),
    ["booting", "lane_down", "no_set_yet"],
  );
  const ready = { generation: 1, tenants: 1, emptyTenants: "not_ready" } as const;
  assert.deepEqual(edgeReasons({ draining: false, armed: true, down: [], set: ready }), []);
});

Deno.test("readinessReply() is 200 {ready:true} with no reason, else 503 with the reasons in the envelope", () => {
  const ok = readinessReply([], "r-1");
  assert.deepEqual([ok.status, ok.body], [200, '{"ready":true}']);
  const reasons = setReasons({ ...EMPTY, follower: {} });
  const no = readinessReply(reasons, "r-2");
  assert.equal(no.status, 503);
  assert.equal(no.failure, "not_ready");
  const body = JSON.parse(no.body as string);
  assert.deepEqual(Object.keys(body), ["error"]);
  assert.deepEqual(
    [body.error.code, body.error.request_id, codesOf(body.error.reasons)],
    ["not_ready", "r-2", ["no_set_yet"]],
  );
  const draining = readinessReply([{ code: "draining", message: "Draining" }], "r-3");
  assert.equal(JSON.parse(draining.body as string).error.code, "draining");
  assert.doesNotMatch(String(no.body), /portcullis/i);
});

/** `/readyz` of an in-process edge: status and reason codes. */
async function readyz(edge: TestEdge): Promise<[number, string[]]> {
  const response = await request(edge.ports.local_health, { path: "/readyz" });
  if (response.status === 200) return [200, []];
  return [
    response.status,
    codesOf(json<{ error: { reasons: { code: string }[] } }>(response).error.reasons),
  ];
}

/** Serves `answer` to every poll on a fresh port, for the duration of `body`. */
async function fakeHub(answer: unknown, body: (url: string) => Promise<void>): Promise<void> {
  const [port] = freePorts(1);
  const server = http.createServer((_request, response) => {
    response.writeHead(200, { "content-type": "application/json" });
    response.end(JSON.stringify(answer));
  });
  await new Promise<void>((resolve) => server.listen(port, "127.0.0.1", resolve));
  try {
    await body(`http://127.0.0.1:${port}`);
  } finally {
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
  }
}

/** A token file and a cache folder for a remote edge; removed after `body`. */
async function edgeFolders(body: (token: string, cache: string) => Promise<void>) {
  const dir = await Deno.makeTempDir({ prefix: "portcullis-ready-" });
  await Deno.writeTextFile(`${dir}/node.token`, "token\n", { mode: 0o600 });
  try {
    await body(`${dir}/node.token`, `${dir}/cache`);
  } finally {
    await Deno.remove(dir, { recursive: true }).catch(() => {});
  }
}

Deno.test("remote edge: a hub that answers with a set that does not check is set_rejected, not unreachable", async () => {
  const files = { "x.test.yaml": "aG9zdDogeC50ZXN0Cg==" };
  const answer = { type: "snapshot", generation: 1, hash: "0".repeat(64), files, hub: null };
  await fakeHub(answer, (url) =>
    edgeFolders(async (token, cache) => {
      const edge = await bootRemoteEdge(url, token, cache);
      try {
        const [status, codes] = await waitFor(() => readyz(edge), ([, c]) =>
          c.length > 0 && c[0] !== "no_set_yet");
        assert.deepEqual([status, codes], [503, ["set_rejected"]]);
        const health = json<{ ready: boolean; reasons: { code: string; message: string }[] }>(
          await request(edge.ports.local_health, { path: "/v1/health" }),
        );
        assert.equal(health.ready, false);
        assert.match(health.reasons[0].message, /hashes to/);
      } finally {
        await edge.dispose();
      }
    }));
});

Deno.test("remote edge: the hub's set with no tenant is not ready (no_tenants); one with a tenant is", async () => {
  const hub = await startTestHub({ files: { "globals.yaml": "{}\n" } });
  try {
    await edgeFolders(async (tokenFile, cache) => {
      await Deno.writeTextFile(tokenFile, `${await hub.token("edge-a")}\n`);
      const edge = await bootRemoteEdge(hub.url, tokenFile, cache);
      try {
        await waitFor(() => readyz(edge), ([, c]) => c[0] === "no_tenants", 5000);
        await hub.write(
          "demo.test.yaml",
          "host: demo.test\nroutes: [{match: {path: /}, respond: {body: hi}}]\n",
        );
        await waitFor(() => readyz(edge), ([status]) => status === 200, 5000);
        assert.equal((await getHost(edge, "demo.test"))[0], 200);
      } finally {
        await edge.dispose();
      }
    });
  } finally {
    await hub.dispose();
  }
});
