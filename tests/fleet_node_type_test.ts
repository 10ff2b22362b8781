/**
 * A node's type is fixed at registration, by the secret `hub add-node` wrote, and a door never
 * reaches the tenant stream or the pool view whatever `api.nodes` or `doors.nodes` say (issue 31,
 * findings 3 and 6). The hub used to take a node's type from the issued record with the highest
 * (random) serial, revoked or not: ids registered as edges, revoked, re-provisioned as doors and
 * renewed twice were served the tenant stream half the time; and a door not listed in
 * `doors.nodes` got the config stream and `/v1/pool`. Real hub processes under derived flags.
 */
import assert from "node:assert/strict";
import { boundedTest } from "./fixtures/bounded_test.ts";
import { FleetProcess, type NodeCredentials } from "./fixtures/fleet_process.ts";
import { addNodeSecret } from "../src/trust/node_secrets.ts";

const OPEN = { renew_before_days: 3650, renew_interval_seconds: 0 };
const REFUSED = "registration_refused";

boundedTest(
  "node type: ten edges revoked and re-provisioned as doors never get tenants; their edge certificates are dead",
  async () => {
    const fleet = await FleetProcess.start({ pool: true, doors: {}, ca: OPEN });
    try {
      const ids = Array.from({ length: 10 }, (_, i) => `node-${i}`);
      const edges = new Map<string, NodeCredentials[]>();
      const doors = new Map<string, NodeCredentials[]>();
      for (const id of ids) {
        const edge = await fleet.enrol(id, "edge");
        const renewed = (await fleet.renew(id, edge)).credentials!;
        edges.set(id, [edge, renewed]);
        assert.equal((await fleet.get("config", id, edge)).status, 200, "an edge gets tenants");
        assert.equal((await fleet.revoke(id)).code, 0);
        // Re-provisioning a revoked id is an explicit step: a plain add-node refuses and says so.
        const plain = await fleet.addNode(id, "door");
        assert.equal(plain.code, 1);
        assert.match(plain.stderr, new RegExp(`${id} is revoked.*--type door --reprovision`));
        const again = await fleet.addNode(id, "door", { reprovision: true });
        assert.equal(again.code, 0, again.stderr);
        assert.match(again.stdout, /incarnation 2/);
        const door = (await fleet.register(id, "door")).credentials!;
        const once = (await fleet.renew(id, door)).credentials!;
        const twice = (await fleet.renew(id, once)).credentials!;
        doors.set(id, [door, once, twice]);
      }
      const served: string[] = [];
      for (const id of ids) {
        for (const [i, credentials] of doors.get(id)!.entries()) {
          for (const route of ["config", "pool"] as const) {
            const answer = await fleet.get(route, id, credentials);
            if (answer.status === 200) served.push(`${route} ${id} door #${i}`);
            else assert.equal(answer.body.error.code, "node_not_allowed");
          }
          assert.equal((await fleet.get("doors", id, credentials)).status, 200, `${id} #${i}`);
        }
        for (const [i, credentials] of edges.get(id)!.entries()) {
          for (const route of ["config", "pool", "doors"] as const) {
            const answer = await fleet.get(route, id, credentials);
            if (answer.status === 200) served.push(`${route} ${id} old edge #${i}`);
            else assert.equal(answer.body.error.code, "node_revoked", `${route} ${id} #${i}`);
          }
          assert.equal((await fleet.renew(id, credentials)).body.error.code, "node_revoked");
        }
      }
      assert.deepEqual(served, []);
      // The type is the registry's, written once: renewals never changed it.
      for (const id of ids) {
        const entry = JSON.parse(await Deno.readTextFile(`${fleet.files.nodesDir}/${id}.json`));
        assert.deepEqual([entry.node_type, entry.incarnation], ["door", 2]);
      }
    } finally {
      await fleet.dispose();
    }
  },
  240_000,
);

boundedTest(
  "node type: doors.nodes only narrows — an unlisted door, and a listed edge, get neither stream nor the pool",
  async () => {
    const fleet = await FleetProcess.start({
      pool: true,
      doors: { nodes: ["door-listed", "edge-listed"] },
      // api.nodes lists them all: it widens nothing either.
      apiNodes: ["door-listed", "door-other", "edge-listed", "edge-1"],
    });
    try {
      const listed = await fleet.enrol("door-listed", "door");
      const other = await fleet.enrol("door-other", "door");
      const listedEdge = await fleet.enrol("edge-listed", "edge");
      const edge = await fleet.enrol("edge-1", "edge");
      const seen = async (id: string, credentials: NodeCredentials) => {
        const codes: string[] = [];
        for (const route of ["config", "pool", "doors"] as const) {
          const answer = await fleet.get(route, id, credentials);
          codes.push(answer.status === 200 ? "200" : answer.body.error.code);
        }
        return codes;
      };
      const notAllowed = "node_not_allowed";
      // A CA door that is listed: the door stream only.
      assert.deepEqual(await seen("door-listed", listed), [notAllowed, notAllowed, "200"]);
      // A CA door the list leaves out: nothing (it was tenants and the pool before).
      assert.deepEqual(await seen("door-other", other), [notAllowed, notAllowed, notAllowed]);
      // A registered edge the list names: a door by the list (no tenants, no pool), and not a
      // door by the CA (no door stream).
      assert.deepEqual(await seen("edge-listed", listedEdge), [notAllowed, notAllowed, notAllowed]);
      // An edge: tenants and the pool, never the door stream.
      assert.deepEqual(await seen("edge-1", edge), ["200", "200", notAllowed]);
    } finally {
      await fleet.dispose();
    }
  },
  60_000,
);

/** Waits (5 s at most) for the hub to log `line`: the refusal is answered before it is read back. */
async function logged(fleet: FleetProcess, line: RegExp): Promise<void> {
  for (const deadline = Date.now() + 5000; !line.test(fleet.hub.stderr);) {
    if (Date.now() > deadline) assert.match(fleet.hub.stderr, line);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

boundedTest(
  "node type: a secret for a registered node, or for a revoked incarnation, registers nothing at the hub",
  async () => {
    const fleet = await FleetProcess.start();
    try {
      const edge = await fleet.enrol("edge-1");
      // Made behind the CLI's back (add-node refuses a registered node): a door secret for it.
      await addNodeSecret(fleet.files.secretsDir, "edge-1", "door");
      assert.equal((await fleet.register("edge-1", "door")).body.error?.code, REFUSED);
      await logged(fleet, /edge-1\W{0,3} refused: the node is registered already/);
      assert.equal((await fleet.get("config", "edge-1", edge)).status, 200, "still the edge");
      // Added, revoked before it registered, then a secret of that same incarnation: refused.
      assert.equal((await fleet.addNode("edge-2")).code, 0);
      assert.equal((await fleet.revoke("edge-2")).code, 0);
      await addNodeSecret(fleet.files.secretsDir, "edge-2", "edge");
      assert.equal((await fleet.register("edge-2", "edge")).body.error?.code, REFUSED);
      await logged(fleet, /edge-2\W{0,3} refused: the node is revoked/);
    } finally {
      await fleet.dispose();
    }
  },
  60_000,
);
