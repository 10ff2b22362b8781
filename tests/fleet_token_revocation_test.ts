/**
 * A token node is revoked the way a certificate node is: removing its token file at the hub ends
 * its stream with `node_revoked`, and the edge — a real process under its derived flags — serves
 * out its grace, stops, deletes its cache, exits 3, and refuses to start again until its operator
 * provisions it anew (a new token, the marker removed).
 */
import assert from "node:assert/strict";
import { parse, stringify } from "yaml";
import { boundedTest } from "./fixtures/bounded_test.ts";
import { Gateway, runCli } from "./fixtures/gateway.ts";
import { disposeAll, getFrom, HubProcess, tenantText, writeRemoteEdge } from "./fixtures/hub.ts";
import { connectionRefused, waitFor } from "./fixtures/in_process.ts";

boundedTest(
  "token revocation: a removed token stops the edge after its grace, cache gone",
  async () => {
    const hub = await HubProcess.start({
      nodes: ["edge-a"],
      runtime: { "site.test.yaml": tenantText("site.test", "site") },
      edit(config) {
        config.revocation = { reload_ms: 200 };
      },
    });
    const written = await writeRemoteEdge(hub, "edge-a");
    const config = parse(await Deno.readTextFile(written.dir.config)) as {
      hub: Record<string, unknown>;
    };
    config.hub.grace_seconds = 1;
    await Deno.writeTextFile(written.dir.config, stringify(config));
    let edge: Gateway | undefined;
    try {
      edge = await Gateway.start(written.dir, written.ports);
      await waitFor(() => getFrom(edge!, "site.test"), (r) => r.status === 200, 10_000);
      await Deno.remove(`${hub.dir}/tokens/edge-a.token`);
      const removedAt = Date.now();
      await waitFor(() => connectionRefused(written.ports.public), (refused) => refused, 15_000)
        .catch(async (e) =>
          Promise.reject(new Error(`${e.message}\n${JSON.stringify(await hub.status())}`))
        );
      const took = Date.now() - removedAt;
      assert.ok(took >= 1000, `stopped ${took} ms after the token went: it served its grace`);
      assert.equal((await edge.exited()).code, 3, edge.stderr);
      assert.match(edge.stderr, /this node is revoked \(the hub answered 403 \(node_revoked/);
      const cache = `${written.dir.dir}/cache`;
      assert.deepEqual([...Deno.readDirSync(cache)].map((e) => e.name), ["revoked.json"]);
      const again = await runCli(edge.flags, ["serve", written.dir.config]);
      assert.equal(again.code, 1);
      assert.match(
        again.stderr,
        /give it a new token \(hub\.token_file\) and remove .*revoked\.json/,
      );
    } finally {
      await disposeAll(edge, hub);
      await Deno.remove(written.dir.dir, { recursive: true }).catch(() => {});
    }
  },
  40_000,
);
