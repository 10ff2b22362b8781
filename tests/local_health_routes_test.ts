/**
 * The `local_health` lane as its Hono router serves it: every route with each method it takes
 * (served) and each it does not (404 `route_not_allowed`, counted as a denial, like anything off a
 * protected lane's list — proofs/p4), the acting routes behind `bearerAuth` with the admin token
 * absent, malformed, wrong or right, and an admin token file no bearer token can carry.
 *
 * @module
 */
import assert from "node:assert/strict";
import { AdminCredential } from "../src/server/admin.ts";
import { ADMIN_TOKEN } from "./fixtures/gateway.ts";
import { request } from "./fixtures/http_client.ts";
import { envelope, waitFor, withEdge } from "./fixtures/in_process.ts";

const READS = [
  "/healthz",
  "/readyz",
  "/v1/health",
  "/v1/ledger",
  "/v1/egress",
  "/metrics",
  "/v1/config",
];
const ACTS = ["/v1/config/reload", "/v1/tls/reload", "/v1/drain"];
const METHODS = ["GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"];
const ADMIN: [string, string] = ["Authorization", `Bearer ${ADMIN_TOKEN}`];

Deno.test("local_health routes: a method a route does not take is a counted 404 route_not_allowed", async () => {
  await withEdge({}, async (t) => {
    const port = t.ports.local_health;
    let denied = 0;
    for (const path of [...READS, ...ACTS]) {
      const takes = READS.includes(path) ? ["GET", "HEAD"] : ["POST"];
      for (const method of METHODS.filter((m) => !takes.includes(m))) {
        const response = await request(port, { method, path, headers: [ADMIN] });
        assert.equal(response.status, 404, `${method} ${path}`);
        if (method !== "HEAD") {
          assert.equal(envelope(response).code, "route_not_allowed", `${method} ${path}`);
        }
        assert.equal(response.headers["allow"], undefined, `${method} ${path}`);
        denied++;
      }
    }
    assert.equal(t.edge.services.state.draining, false);
    const ledger = await waitFor(() => t.snapshot(), (s) => s.outstanding === 0);
    assert.equal(ledger.lanes.local_health.denied_route, denied);
  });
});

Deno.test("local_health routes: each route answers the methods it takes, HEAD without a body", async () => {
  await withEdge({}, async (t) => {
    const port = t.ports.local_health;
    for (const path of READS) {
      const response = await request(port, { path });
      assert.equal(response.status, 200, path);
    }
    const get = await request(port, { path: "/healthz" });
    const head = await request(port, { method: "HEAD", path: "/healthz" });
    assert.equal(head.status, 200);
    assert.equal(head.body, "");
    assert.equal(head.headers["content-length"], get.headers["content-length"]);
    const reload = await request(port, {
      method: "POST",
      path: "/v1/config/reload",
      headers: [ADMIN],
    });
    assert.equal(reload.status, 200);
    const tls = await request(port, { method: "POST", path: "/v1/tls/reload", headers: [ADMIN] });
    assert.equal(tls.status, 404, "no TLS configured: the handler's own answer");
    assert.equal(envelope(tls).code, "route_not_allowed");
    const drain = await request(port, { method: "POST", path: "/v1/drain", headers: [ADMIN] });
    assert.equal(drain.status, 202);
    assert.equal(t.edge.services.state.draining, true);
  });
});

Deno.test("local_health routes: acting without the exact bearer token is 401 with WWW-Authenticate", async () => {
  await withEdge({}, async (t) => {
    const port = t.ports.local_health;
    const refused: (readonly [string, string][])[] = [
      [],
      [["Authorization", "Bearer"]],
      [["Authorization", `Basic ${btoa(`admin:${ADMIN_TOKEN}`)}`]],
      [["Authorization", `Bearer ${ADMIN_TOKEN} extra`]],
      [["Authorization", `Bearer {${ADMIN_TOKEN}}`]],
      [["Authorization", `Bearer ${ADMIN_TOKEN.slice(0, -1)}`]],
      [["Authorization", `Bearer ${ADMIN_TOKEN}0`]],
    ];
    for (const path of ACTS) {
      for (const headers of refused) {
        const response = await request(port, { method: "POST", path, headers });
        const what = `${path} ${JSON.stringify(headers).slice(0, 50)}`;
        assert.equal(response.status, 401, what);
        assert.equal(envelope(response).code, "admin_credential_required", what);
        // No realm unless admin.realm names one: a default would name the software.
        assert.equal(response.headers["www-authenticate"], "Bearer", what);
      }
    }
    assert.equal(t.edge.services.state.draining, false, "no refused drain drained");
    const lower = await request(port, {
      method: "POST",
      path: "/v1/config/reload",
      headers: [["Authorization", `bearer ${ADMIN_TOKEN}`]],
    });
    assert.equal(lower.status, 200, "the scheme is case-insensitive (RFC 9110 §11.1)");
  });
});

Deno.test("AdminCredential.load() refuses a token no bearer header can carry, naming the file", async () => {
  const dir = await Deno.makeTempDir({ prefix: "portcullis-admin-token-" });
  try {
    const file = `${dir}/admin.token`;
    await Deno.writeTextFile(file, "admin-token-with-{braces}-0123\n", { mode: 0o600 });
    await Deno.chmod(file, 0o600);
    await assert.rejects(() => AdminCredential.load(file), (error: Error) => {
      assert.match(error.message, new RegExp(`admin.token_file ${file} must hold one token`));
      assert.match(error.message, /RFC 6750/);
      return true;
    });
    await Deno.writeTextFile(file, "admin.token_0123456789~+/=\n");
    assert.equal(
      (await AdminCredential.load(file)).permitsToken("admin.token_0123456789~+/="),
      true,
    );
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
