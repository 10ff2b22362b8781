/**
 * Concurrent registrations of one node (an attack on issue 31's retry window): 12 registrations at
 * once with one secret and one key used to get 7 refusals ("no unspent secret matches") — they
 * read the secrets folder after the first had renamed the secret away and before it had written
 * the record a retry is answered from — while retries after it finished got the same certificate.
 * Now a node's registrations run one at a time from before the secret is consumed: every
 * same-key registration waits and gets the one certificate; with twelve keys exactly one gets a
 * certificate. A real hub process under its derived flags; the requests go out on connections
 * opened beforehand, so they reach the hub within a millisecond or two of each other.
 */
import assert from "node:assert/strict";
import { boundedTest } from "./fixtures/bounded_test.ts";
import { FleetProcess } from "./fixtures/fleet_process.ts";
import { csrForKey, makeNodeKeyAndCsr } from "../src/trust/csr.ts";

const AT_ONCE = 12;

/** One client per registration, its TLS connection made before any registration is sent. */
async function warmClients(fleet: FleetProcess, count: number): Promise<Deno.HttpClient[]> {
  const clients = Array.from({ length: count }, () => fleet.client());
  await Promise.all(clients.map(async (client) => {
    const response = await fetch(new URL("/v1/nodes/register", fleet.hub.url), { client });
    await response.body?.cancel();
  }));
  return clients;
}

/** Sends every body at once, each on its own warm client: statuses and bodies, in order. */
async function registerAtOnce(
  fleet: FleetProcess,
  bodies: readonly Record<string, string>[],
): Promise<{ status: number; body: Record<string, unknown> }[]> {
  const clients = await warmClients(fleet, bodies.length);
  try {
    return await Promise.all(bodies.map(async (body, i) => {
      const response = await fetch(new URL("/v1/nodes/register", fleet.hub.url), {
        method: "POST",
        body: JSON.stringify(body),
        headers: { "content-type": "application/json" },
        client: clients[i],
      });
      return { status: response.status, body: await response.json() };
    }));
  } finally {
    for (const client of clients) client.close();
  }
}

/** The certificates recorded for a node in the CA's issued index. */
function issuedFor(fleet: FleetProcess, nodeId: string): string[] {
  return [...Deno.readDirSync(`${fleet.files.issuedDir}/${nodeId}`)].map((entry) => entry.name);
}

boundedTest(
  "registration: concurrent registrations with one secret and one key all get the one certificate",
  async () => {
    const fleet = await FleetProcess.start({ ca: { registration_retry_seconds: 30 } });
    try {
      assert.equal((await fleet.addNode("edge-1")).code, 0);
      const secret = await fleet.secretOf("edge-1");
      const { keyPem, csrPem } = await makeNodeKeyAndCsr("edge-1");
      const body = { node_id: "edge-1", node_type: "edge", csr: csrPem, secret };
      const answers = await registerAtOnce(fleet, Array.from({ length: AT_ONCE }, () => body));
      const statuses = answers.map((answer) => answer.status);
      assert.deepEqual(
        statuses,
        statuses.map(() => 200),
        JSON.stringify(answers.map((a) => a.body)),
      );
      const certificates = new Set(answers.map((answer) => answer.body.certificate));
      assert.equal(certificates.size, 1, "one certificate, answered to every registration");
      assert.equal(issuedFor(fleet, "edge-1").length, 1, "one certificate issued");
      // The hub's lines reach its stderr through a queue: poll for them, with a deadline.
      const askedAgain = () => fleet.hub.stderr.match(/asked again with the same key/g)?.length;
      const deadline = Date.now() + 10_000;
      while (askedAgain() !== AT_ONCE - 1 && Date.now() < deadline) {
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
      assert.equal(askedAgain(), AT_ONCE - 1, fleet.hub.stderr);
      // The key that asked is the key the certificate is for: it works.
      const chainPem = [...certificates][0] as string;
      assert.equal((await fleet.get("config", "edge-1", { keyPem, chainPem })).status, 200);
    } finally {
      await fleet.dispose();
    }
  },
  90_000,
);

boundedTest(
  "registration: concurrent registrations with one secret and twelve keys get exactly one certificate",
  async () => {
    const fleet = await FleetProcess.start({ ca: { registration_retry_seconds: 30 } });
    try {
      assert.equal((await fleet.addNode("edge-2")).code, 0);
      const secret = await fleet.secretOf("edge-2");
      const bodies = await Promise.all(
        Array.from({ length: AT_ONCE }, async () => {
          const { csrPem } = await makeNodeKeyAndCsr("edge-2");
          return { node_id: "edge-2", node_type: "edge", csr: csrPem, secret };
        }),
      );
      const answers = await registerAtOnce(fleet, bodies);
      const granted = answers.filter((answer) => answer.status === 200);
      assert.equal(granted.length, 1, JSON.stringify(answers.map((a) => a.status)));
      for (const answer of answers) {
        if (answer.status === 200) continue;
        assert.equal(answer.status, 403);
        assert.equal((answer.body.error as { code: string }).code, "registration_refused");
      }
      assert.equal(issuedFor(fleet, "edge-2").length, 1, "one certificate issued");
      // The winning key may ask again; any other key stays refused.
      const winner = bodies[answers.findIndex((answer) => answer.status === 200)];
      const again = await registerAtOnce(fleet, [winner]);
      assert.equal(again[0].status, 200);
      assert.equal(again[0].body.certificate, granted[0].body.certificate);
      const { keyPem } = await makeNodeKeyAndCsr("edge-2");
      const other = await registerAtOnce(fleet, [{
        ...winner,
        csr: await csrForKey("edge-2", keyPem),
      }]);
      assert.equal(other[0].status, 403);
    } finally {
      await fleet.dispose();
    }
  },
  90_000,
);
