/**
 * The hub's listeners as routed by their Hono apps: every route with each method it takes and
 * each it does not (405 with `Allow`, to a node that authenticated), unknown paths, the query's
 * checks naming the field, and bearer tokens present, absent, malformed and wrong (all the same 404
 * as an unknown path: hub_outsider_test.ts). Enrolment bodies are in
 * fleet_registration_test.ts and hub_enrol_body_test.ts.
 *
 * @module
 */
import assert from "node:assert/strict";
import { json, request } from "./fixtures/http_client.ts";
import { startTestHub, type TestHub } from "./fixtures/hub_in_process.ts";

interface Envelope {
  error: { code: string; message: string; request_id: string; field?: string };
}

const OTHER_METHODS = ["GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"];

/** Every route of each listener and the methods it takes (GET also takes HEAD). */
const ROUTES = {
  api: { "/v1/config/stream": ["GET"], "/v1/pool": ["GET"] },
  health: {
    "/healthz": ["GET"],
    "/v1/config": ["GET"],
    "/v1/nodes": ["GET"],
    "/v1/config/reload": ["POST"],
  },
} as const;

async function withHub(body: (t: TestHub) => Promise<void>): Promise<void> {
  const t = await startTestHub({ pool: { hostname: "127.0.0.1", ports: () => [19050] } });
  try {
    await body(t);
  } finally {
    await t.dispose();
  }
}

function envelope(response: { body: string }): Envelope["error"] {
  return json<Envelope>(response as never).error;
}

Deno.test("hub routes: a method a route does not take is 405 with Allow, every route, both listeners", async () => {
  await withHub(async (t) => {
    const token = await t.token("edge-a");
    for (const [listener, routes] of Object.entries(ROUTES)) {
      // The api answers its routes only to a node that authenticated (the rest get the 404).
      const member: [string, string][] = listener === "api"
        ? [["Authorization", `Bearer ${token}`]]
        : [];
      const query = listener === "api" ? "?node_id=edge-a" : "";
      const port = listener === "api" ? t.apiPort : t.healthPort;
      for (const [path, methods] of Object.entries(routes)) {
        const allow = (methods as readonly string[]).flatMap((m) =>
          m === "GET" ? ["GET", "HEAD"] : [m]
        );
        for (const method of OTHER_METHODS.filter((m) => !allow.includes(m))) {
          const response = await request(port, {
            method,
            path: path + query,
            headers: [["X-Request-Id", "method-check"], ...member],
          });
          const what = `${method} ${path} on ${listener}`;
          assert.equal(response.status, 405, what);
          assert.equal(response.headers["allow"], allow.join(", "), what);
          assert.equal(envelope(response).code, "method_not_allowed", what);
          assert.equal(envelope(response).request_id, "method-check", what);
          assert.equal(response.headers["x-request-id"], "method-check", what);
          assert.equal(response.headers["cache-control"], "no-store", what);
        }
      }
    }
  });
});

Deno.test("hub routes: the methods a route takes are served, HEAD as GET without a body", async () => {
  await withHub(async (t) => {
    const health = await request(t.healthPort, { path: "/healthz" });
    assert.equal(health.status, 200);
    assert.deepEqual(json(health), { status: "ok" });
    const head = await request(t.healthPort, { method: "HEAD", path: "/v1/config" });
    const get = await request(t.healthPort, { path: "/v1/config" });
    assert.equal(head.status, 200);
    assert.equal(head.body, "");
    assert.equal(head.headers["content-length"], get.headers["content-length"]);
    assert.equal(json<{ node_id: string }>(get).node_id, "test-hub");
    const nodes = await request(t.healthPort, { path: "/v1/nodes" });
    assert.deepEqual(json(nodes), { nodes: [] });
    const reload = await request(t.healthPort, { method: "POST", path: "/v1/config/reload" });
    assert.equal(reload.status, 200);
    assert.equal(json<{ outcome: string }>(reload).outcome, "unchanged");
    // Liveness is the health listener's: the api has no /healthz (hub_outsider_test.ts).
    assert.equal((await request(t.apiPort, { method: "HEAD", path: "/healthz" })).status, 404);
  });
});

Deno.test("hub routes: an unknown path is 404 route_not_allowed on both listeners", async () => {
  await withHub(async (t) => {
    const probes: [number, string][] = [
      [t.apiPort, "/"],
      [t.apiPort, "/v1/config"],
      [t.apiPort, "/v1/config/stream/"],
      [t.apiPort, "/V1/config/stream"],
      [t.apiPort, "/v1/nodes/register"], // no fleet CA: no enrolment
      [t.apiPort, "/v1/doors/stream"], // no doors
      [t.healthPort, "/v1/config/stream"],
      [t.healthPort, "/v1/pool"],
      [t.healthPort, "/healthz/x"],
    ];
    for (const [port, path] of probes) {
      const response = await request(port, { method: "POST", path });
      assert.equal(response.status, 404, path);
      assert.equal(envelope(response).code, "route_not_allowed", path);
      assert.equal(response.headers["allow"], undefined, path);
    }
  });
});

Deno.test("hub routes: a query that fails its schema is 400 naming the field, after the token; without it, 404", async () => {
  await withHub(async (t) => {
    const token = await t.token("edge-a");
    const auth: [string, string] = ["Authorization", `Bearer ${token}`];
    const cases: [string, string, string][] = [
      ["/v1/config/stream?node_id=edge-a&node_id=edge-b", "bad_node_id", "node_id"],
      ["/v1/config/stream?node_id=edge-a&have=x&have=y", "bad_request", "have"],
    ];
    for (const [path, code, field] of cases) {
      const response = await request(t.apiPort, { path, headers: [auth] });
      assert.equal(response.status, 400, path);
      assert.equal(envelope(response).code, code, path);
      assert.equal(envelope(response).field, field, path);
    }
    // A token proves a node only with the node_id it names: without one (or with one that is no
    // node id) the caller has not authenticated, and no query is judged for it.
    const outsiders: [string, [string, string][]][] = [
      ["/v1/config/stream", [auth]],
      ["/v1/config/stream?node_id=../edge-a", [auth]],
      ["/v1/pool?node_id=", [auth]],
      ...cases.map(([path]) => [path, []] as [string, [string, string][]]),
    ];
    for (const [path, headers] of outsiders) {
      const response = await request(t.apiPort, { path, headers });
      assert.equal(response.status, 404, path);
      assert.equal(envelope(response).code, "route_not_allowed", path);
    }
    const fine = await request(t.apiPort, {
      path: "/v1/config/stream?node_id=edge-a&wait=0&extra=1",
      headers: [auth],
    });
    assert.equal(fine.status, 200, "a field the schema does not name is ignored");
  });
});

Deno.test("hub routes: a bearer token absent, malformed or wrong is the unknown path's 404; the node's own is served", async () => {
  await withHub(async (t) => {
    const token = await t.token("edge-a");
    const path = "/v1/pool?node_id=edge-a";
    const refused: (readonly [string, string][])[] = [
      [],
      [["Authorization", ""]],
      [["Authorization", "Bearer"]],
      [["Authorization", `Basic ${btoa(`edge-a:${token}`)}`]],
      [["Authorization", `Bearer ${token} extra`]],
      [["Authorization", `Bearer {${token}}`]],
      [["Authorization", `Bearer ${token.slice(1)}`]],
      [["Authorization", `Bearer ${token}x`]],
      [["Authorization", `Bearer ${"a".repeat(2000)}`]],
    ];
    for (const headers of refused) {
      const response = await request(t.apiPort, { path, headers });
      const what = JSON.stringify(headers).slice(0, 60);
      assert.equal(response.status, 404, what);
      assert.equal(envelope(response).code, "route_not_allowed", what);
      // No challenge: it would tell a protected path from an unknown one.
      assert.equal(response.headers["www-authenticate"], undefined, what);
      assert.equal(response.headers["x-request-id"], envelope(response).request_id, what);
    }
    for (const scheme of ["Bearer", "bearer"]) {
      const response = await request(t.apiPort, {
        path,
        headers: [["Authorization", `${scheme} ${token}`]],
      });
      assert.equal(response.status, 200, scheme);
      assert.deepEqual(json(response), { backends: [{ port: 19050 }] });
    }
  });
});

Deno.test("hub routes: a token file that is no RFC 6750 token authenticates nobody, and says so", async () => {
  await withHub(async (t) => {
    const file = `${t.dir}/tokens/edge-x.token`;
    await Deno.writeTextFile(file, "not a {bearer} token\n", { mode: 0o600 });
    await Deno.chmod(file, 0o600);
    const response = await request(t.apiPort, {
      path: "/v1/config/stream?node_id=edge-x&wait=0",
      headers: [["Authorization", "Bearer not"]],
    });
    assert.equal(response.status, 404);
    assert.ok(
      t.lines.some((line) => line.includes("edge-x.token holds characters a bearer token")),
      t.lines.join("\n"),
    );
  });
});
