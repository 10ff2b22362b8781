/**
 * One node's renewals do not slow the hub for the others (issue 31, finding 9: 552 renewals by one
 * node made another node's config poll 174 ms instead of 3.5 ms, because every poll read every
 * issued record, and none was ever pruned). Records are kept per node (`issued/<node_id>/`) and
 * each node's standing is held in memory, so a poll reads no file: another node's poll costs the
 * same after 500 renewals as before. A real hub process under its derived flags.
 */
import assert from "node:assert/strict";
import { boundedTest } from "./fixtures/bounded_test.ts";
import { FleetProcess, type NodeCredentials } from "./fixtures/fleet_process.ts";

const RENEWALS = 500;

/** The median time of `rounds` config polls (answered at once) by `nodeId`, in ms. */
async function pollMs(
  fleet: FleetProcess,
  nodeId: string,
  credentials: NodeCredentials,
  rounds = 40,
): Promise<number> {
  const client = fleet.client(credentials);
  const url = new URL(`/v1/config/stream?node_id=${nodeId}&have=&wait=0`, fleet.hub.url);
  const times: number[] = [];
  try {
    for (let i = 0; i < rounds; i++) {
      const started = performance.now();
      const response = await fetch(url, { client });
      await response.body?.cancel();
      assert.equal(response.status, 200);
      times.push(performance.now() - started);
    }
  } finally {
    client.close();
  }
  return times.sort((a, b) => a - b)[Math.floor(rounds / 2)];
}

boundedTest(
  "poll cost: another node's config poll costs the same after one node's 500 renewals",
  async () => {
    const fleet = await FleetProcess.start({
      ca: { renew_before_days: 3650, renew_interval_seconds: 0 },
    });
    try {
      const busy = await fleet.enrol("edge-busy");
      const quiet = await fleet.enrol("edge-quiet");
      await pollMs(fleet, "edge-quiet", quiet, 10); // warm the connection and the hub
      const before = await pollMs(fleet, "edge-quiet", quiet);
      let renewals = 0;
      await Promise.all([0, 1, 2, 3].map(async () => {
        let held = busy;
        while (renewals < RENEWALS) {
          renewals++;
          const answer = await fleet.renew("edge-busy", held);
          assert.equal(answer.status, 200, JSON.stringify(answer.body));
          held = answer.credentials!;
        }
      }));
      const after = await pollMs(fleet, "edge-quiet", quiet);
      console.log(
        `poll median before ${before.toFixed(2)} ms, after ${RENEWALS} renewals ${
          after.toFixed(2)
        } ms`,
      );
      assert.ok(after < before * 3 + 10, `before ${before} ms, after ${after} ms`);
      // The records are the busy node's own: the quiet node's folder holds its one certificate.
      const count = (folder: string) => [...Deno.readDirSync(folder)].length;
      assert.equal(count(`${fleet.files.issuedDir}/edge-busy`), RENEWALS + 1);
      assert.equal(count(`${fleet.files.issuedDir}/edge-quiet`), 1);
    } finally {
      await fleet.dispose();
    }
  },
  180_000,
);
