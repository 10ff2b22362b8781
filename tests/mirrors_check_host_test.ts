/**
 * The check-host.net client against a fetch double (never the real service): the check request it
 * makes, results polled until every node answered, `null` read as "still checking", and a timeout
 * handing back what came.
 *
 * @module
 */
import assert from "node:assert/strict";
import { CheckHostClient, checkHostNode } from "../src/hub/mirrors/check_host.ts";

/** A fetch that answers from a script of JSON bodies and records the URLs asked. */
function scripted(bodies: unknown[], asked: string[]): typeof fetch {
  return (input: string | URL | Request) => {
    asked.push(String(input));
    const body = bodies.shift();
    if (body === undefined) return Promise.resolve(new Response("gone", { status: 503 }));
    return Promise.resolve(Response.json(body));
  };
}

Deno.test("CheckHostClient.check() starts an HTTP check and polls until every node answered", async () => {
  const asked: string[] = [];
  const client = new CheckHostClient({
    pollMs: 1,
    fetch: scripted([
      { ok: 1, request_id: "a1b2c3", nodes: {} },
      { "de1.node.check-host.net": null, "ir1.node.check-host.net": null },
      { "de1.node.check-host.net": [[1, 0.2, "OK", "200"]], "ir1.node.check-host.net": null },
      {
        "de1.node.check-host.net": [[1, 0.2, "OK", "200"]],
        "ir1.node.check-host.net": [[0, 3.0, "Connection timed out", null]],
      },
    ], asked),
  });
  const answers = await client.check("mirror.example", ["de1", "ir1"], AbortSignal.timeout(5000));
  assert.deepEqual(Object.fromEntries(answers), { de1: "ok", ir1: "failed" });
  assert.equal(
    asked[0],
    "https://check-host.net/check-http?host=https%3A%2F%2Fmirror.example%2F" +
      "&node=de1.node.check-host.net&node=ir1.node.check-host.net",
  );
  assert.deepEqual(asked.slice(1), Array(3).fill("https://check-host.net/check-result/a1b2c3"));
  assert.equal(checkHostNode("us1.node.check-host.net"), "us1.node.check-host.net");
});

Deno.test("CheckHostClient.check() hands back what answered when its time runs out", async () => {
  const pending = {
    "de1.node.check-host.net": [[1, 0.1, "OK", "200"]],
    "ir1.node.check-host.net": null,
  };
  const bodies: unknown[] = [{ ok: 1, request_id: "x9" }, ...Array(1000).fill(pending)];
  const client = new CheckHostClient({ pollMs: 5, fetch: scripted(bodies, []) });
  const answers = await client.check("m.example", ["de1", "ir1"], AbortSignal.timeout(100));
  assert.deepEqual(Object.fromEntries(answers), { de1: "ok" });
  const refused = new CheckHostClient({
    pollMs: 1,
    fetch: scripted([{ ok: 0, error: "limit" }], []),
  });
  await assert.rejects(
    refused.check("m.example", ["de1"], AbortSignal.timeout(1000)),
    /did not start the check/,
  );
});
