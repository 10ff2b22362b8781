/**
 * Config generations (src/live/generations.ts) at the unit level, for what the end-to-end reload
 * tests cannot tell apart: a set the process's own check refuses (backends out of reach, a tenant
 * aimed at this process's listeners) never goes live, and two different file sets never share a
 * hash. Killed mutations: `generations.check-problems-ignored`, `generations.hash-without-lengths`.
 *
 * @module
 */
import assert from "node:assert/strict";
import { ConfigStore, hashTexts } from "../src/live/generations.ts";
import type { ConfigProblem } from "../src/config/problems.ts";
import { buildRegistry } from "../src/proxy/tenants.ts";

const DIR = "/srv/portcullis/tenants";

function tenant(host: string): string {
  return `host: ${host}\nroutes:\n  - name: home\n    match: { path: / }\n    respond: { body: "${host}" }\n`;
}

/** A store whose first generation serves `a.test`, with `check` as its own rule. */
async function storeWith(check: (hosts: string[]) => ConfigProblem[]): Promise<ConfigStore> {
  const texts = new Map([["a.test.yaml", tenant("a.test")]]);
  const built = await buildRegistry(DIR, texts);
  assert.deepEqual(built.problems, []);
  return new ConfigStore({
    number: 1,
    hash: await hashTexts(texts),
    loadedAt: 0,
    source: "directory",
    dir: DIR,
    registry: built.registry!,
    texts,
  }, (registry) => check(registry.tenants.map((t) => t.host)));
}

Deno.test("ConfigStore.offer() rejects a valid set its own check refuses; the live one stays", async () => {
  const refusal: ConfigProblem = {
    file: `${DIR}/inward.test.yaml`,
    path: ["routes", 0, "proxy", "backends", 0, "url"],
    message: "Backend is a listener of this process",
  };
  const store = await storeWith((hosts) => hosts.includes("inward.test") ? [refusal] : []);
  const outcome = await store.offer({
    dir: DIR,
    source: "directory",
    texts: new Map([["a.test.yaml", tenant("a.test")], [
      "inward.test.yaml",
      tenant("inward.test"),
    ]]),
  });
  assert.equal(outcome.outcome, "rejected");
  assert.equal(store.current.number, 1);
  assert.deepEqual(store.registry().tenants.map((t) => t.host), ["a.test"]);
  assert.equal(store.lastRejected?.number, 2);
  assert.deepEqual(store.lastRejected?.problems, [refusal]);

  const good = await store.offer({
    dir: DIR,
    source: "directory",
    texts: new Map([["a.test.yaml", tenant("a.test")], ["b.test.yaml", tenant("b.test")]]),
  });
  assert.equal(good.outcome, "loaded");
  assert.deepEqual(store.registry().tenants.map((t) => t.host), ["a.test", "b.test"]);
  assert.equal(store.rejectionSuperseded, true);
});

Deno.test("hashTexts() gives different sets different hashes, however names and texts split", async () => {
  const sets: [string, string][][] = [
    [["a.yaml", "bc"]],
    [["a.yamlb", "c"]],
    [["a.yaml", "b"], ["c", ""]],
    [["a.yaml", ""], ["bc", ""]],
    [["a.yaml", "b\0c"]],
    [["a.yaml", "b"], ["c.yaml", "d"]],
    [["a.yaml", "b\0c.yaml\0d"]],
  ];
  const hashes = await Promise.all(sets.map((set) => hashTexts(new Map(set))));
  assert.equal(new Set(hashes).size, sets.length, hashes.join("\n"));
  // Order of insertion does not matter: the names are sorted.
  assert.equal(
    await hashTexts(new Map([["c.yaml", "d"], ["a.yaml", "b"]])),
    hashes[5],
  );
});
