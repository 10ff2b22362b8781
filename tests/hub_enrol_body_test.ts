/**
 * Enrolment as the hub's Hono app routes it: `POST` only (405 with `Allow` to a node with a
 * certificate, the unknown path's 404 to anyone else), the body one small
 * JSON object (else `payload_not_json`) whose fields are checked by a schema naming the field that
 * failed, and renewal's node id and certificate checked before its body is read.
 *
 * @module
 */
import assert from "node:assert/strict";
import { boundedTest } from "./fixtures/bounded_test.ts";
import { type FleetHub, type NodeCredentials, startFleetHub } from "./fixtures/fleet.ts";

async function withFleet(test: (fleet: FleetHub) => Promise<void>): Promise<void> {
  const fleet = await startFleetHub();
  try {
    await test(fleet);
  } finally {
    await fleet.dispose();
  }
}

/** One request to the hub's api over TLS (no client certificate unless given): status, headers, JSON. */
async function ask(
  fleet: FleetHub,
  path: string,
  init: RequestInit = {},
  credentials?: NodeCredentials,
) {
  const client = fleet.client(credentials);
  try {
    const response = await fetch(new URL(path, fleet.test.url), { ...init, client });
    const text = await response.text();
    return {
      status: response.status,
      headers: response.headers,
      body: text ? JSON.parse(text) : {},
    };
  } finally {
    client.close();
  }
}

boundedTest(
  "enrolment routes: every method but POST is 405 with Allow: POST to a node, 404 to anyone else",
  () =>
    withFleet(async (fleet) => {
      const member = await fleet.enrol("edge-1");
      for (const path of ["/v1/nodes/register", "/v1/nodes/renew?node_id=edge-1"]) {
        for (const method of ["GET", "PUT", "DELETE", "PATCH"]) {
          const outsider = await ask(fleet, path, { method });
          assert.equal(outsider.status, 404, `${method} ${path} without a certificate`);
          assert.equal(outsider.headers.get("allow"), null, `${method} ${path}`);
          const answer = await ask(fleet, path, { method }, member);
          assert.equal(answer.status, 405, `${method} ${path}`);
          assert.equal(answer.headers.get("allow"), "POST", `${method} ${path}`);
          assert.equal(answer.body.error.code, "method_not_allowed");
        }
      }
    }),
  20_000,
);

boundedTest(
  "registration: a JSON object missing a field or with one of the wrong type is 400 naming it",
  () =>
    withFleet(async (fleet) => {
      const good = { node_id: "edge-1", node_type: "edge", csr: "x", secret: "y" };
      const cases: [Record<string, unknown>, string][] = [
        [{}, "node_id"],
        [{ ...good, node_id: 7 }, "node_id"],
        [{ ...good, node_type: ["edge"] }, "node_type"],
        [{ ...good, csr: null }, "csr"],
        [{ node_id: "edge-1", node_type: "edge", csr: "x" }, "secret"],
      ];
      for (const [body, field] of cases) {
        const answer = await ask(fleet, "/v1/nodes/register", {
          method: "POST",
          body: JSON.stringify(body),
        });
        assert.equal(answer.status, 400, field);
        assert.equal(answer.body.error.code, "bad_request", field);
        assert.equal(answer.body.error.field, field);
      }
      // Every field present: what they hold is the registration's to judge, with its one answer.
      const refused = await ask(fleet, "/v1/nodes/register", {
        method: "POST",
        body: JSON.stringify({ ...good, extra: true }),
      });
      assert.equal(refused.status, 403);
      assert.equal(refused.body.error.code, "registration_refused");
    }),
  20_000,
);

boundedTest(
  "registration: malformed JSON, a non-object and a body over 32 KiB are payload_not_json",
  () =>
    withFleet(async (fleet) => {
      const bodies = ["{", '"edge-1"', "null", "[1]", JSON.stringify({ pad: "x".repeat(33_000) })];
      for (const body of bodies) {
        const answer = await ask(fleet, "/v1/nodes/register", { method: "POST", body });
        assert.equal(answer.status, 400, body.slice(0, 12));
        assert.equal(answer.body.error.code, "payload_not_json", body.slice(0, 12));
        assert.equal(answer.body.error.field, undefined);
      }
    }),
  20_000,
);

boundedTest(
  "renewal: a caller without a certificate is the unknown path's 404; a node's id is checked before its body",
  () =>
    withFleet(async (fleet) => {
      const body = JSON.stringify({ node_id: "edge-1", csr: "x" });
      const member = await fleet.enrol("edge-1");
      const outsider = await ask(fleet, "/v1/nodes/renew?node_id=../x", { method: "POST", body });
      assert.equal(outsider.status, 404, "no certificate: no query is judged");
      const bad = await ask(
        fleet,
        "/v1/nodes/renew?node_id=../x",
        { method: "POST", body },
        member,
      );
      assert.equal(bad.status, 400);
      assert.equal(bad.body.error.code, "bad_node_id");
      assert.equal(bad.body.error.field, "node_id");
      const anonymous = await ask(fleet, "/v1/nodes/renew?node_id=edge-1", {
        method: "POST",
        body: "not json",
      });
      assert.equal(anonymous.status, 404, "no certificate: refused before the body is judged");
      assert.equal(anonymous.body.error.code, "route_not_allowed");
    }),
  20_000,
);
