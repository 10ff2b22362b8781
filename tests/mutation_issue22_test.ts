/**
 * Behaviour of issue 22 that no other test pinned, found by mutations the suite survived
 * (scripts/mutations.json): `flags` on a door config refuses what `check` refuses; an edge whose
 * config says nothing about `drain` keeps its public lane serving through a 5 s lame-duck window;
 * and the access log's path behind an admin gate writes each gate-shaped leading segment as `-`.
 *
 * @module
 */
import assert from "node:assert/strict";
import { withoutGateSegments } from "../src/pipeline/admin_gate.ts";
import { runMain } from "./fixtures/gateway.ts";
import { request } from "./fixtures/http_client.ts";
import { envelope, withEdge, within } from "./fixtures/in_process.ts";

Deno.test("cli flags: a door config whose hub.token_file is missing is refused like check refuses it", async () => {
  const dir = await Deno.makeTempDir({ prefix: "portcullis-door-flags-" });
  const config = `${dir}/door.yaml`;
  await Deno.writeTextFile(`${dir}/cover.html`, "<p>cover</p>\n");
  await Deno.writeTextFile(
    config,
    "role: door\nnode_id: door-1\nlisten:\n  - { hostname: 127.0.0.1, port: 8082 }\n" +
      "cover_file: cover.html\nhealth: { listen: [{ hostname: 127.0.0.1, port: 9921 }] }\n" +
      "hub: { url: http://127.0.0.1:9443, token_file: tokens/door-1.token }\n" +
      "cache_dir: cache\n",
  );
  try {
    const check = await runMain(["check", config]);
    assert.equal(check.code, 1, check.stdout);
    assert.match(
      check.stderr,
      /hub\.token_file: The file does not exist \(got "tokens\/door-1\.token"\)/,
    );
    const flags = await runMain(["flags", config]);
    assert.equal(flags.code, 1, flags.stdout);
    assert.equal(flags.stdout, "", "flags prints no flags for a door config check refuses");
    assert.equal(flags.stderr, check.stderr);

    await Deno.mkdir(`${dir}/tokens`);
    await Deno.writeTextFile(`${dir}/tokens/door-1.token`, "door-token-0123456789\n", {
      mode: 0o600,
    });
    const granted = await runMain(["flags", config]);
    assert.equal(granted.code, 0, granted.stderr);
    assert.match(granted.stdout, /^--allow-net=/);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("drain: with no drain settings the lame-duck window is 5000 ms and the public lane serves in it", async () => {
  await withEdge({ edit: (config) => delete config.drain }, async (t) => {
    const drained = t.edge.drain();
    const ready = await request(t.ports.local_health, { path: "/readyz" });
    assert.equal(ready.status, 503);
    assert.equal(envelope(ready).code, "draining");
    const home = await request(t.ports.public, { path: "/", headers: [["Host", "demo.test"]] });
    assert.equal(home.status, 200, "the public lane still serves in the default window");
    assert.ok(
      t.lines.includes("portcullis: draining: not ready; public admission stops in 5000 ms"),
      t.lines.join("\n"),
    );
    assert.ok(!t.lines.includes("portcullis: draining: public admission stopped"));
    await t.edge.close();
    assert.notEqual(await within(drained, 1000), "timeout");
  });
});

Deno.test("withoutGateSegments() writes every run of 16 or more gate characters as -", () => {
  const slug = "slug-0123456789abcdeX";
  const t1 = "t1_ABCDEFGHIJKLMNOPq";
  const t2 = "t2-qrstuvwxyz0123456";
  assert.equal(withoutGateSegments(`/${slug}/${t1}/${t2}/`), "/-/-/-/");
  assert.equal(withoutGateSegments(`/${slug}/${t1}/${t2}/${slug}`), "/-/-/-/-");
  assert.equal(withoutGateSegments(`/shop/${t1}/cart`), "/shop/-/cart");
  assert.equal(withoutGateSegments(`/${slug}.html`), "/-.html");
  // Under 16 gate characters in a row is no gate segment: written as it came.
  assert.equal(withoutGateSegments("/shop/cart/0123456789abcde"), "/shop/cart/0123456789abcde");
  assert.equal(
    withoutGateSegments("/0123456789abcde/0123456789abcde"),
    "/0123456789abcde/0123456789abcde",
  );
  assert.equal(withoutGateSegments("/"), "/");
});

Deno.test("withoutGateSegments() masks the gate's segments in a target of any form and any near miss", () => {
  // The outside attack's spellings: each put a secret in the log while the mask counted segments.
  const slug = "sLuGaB3dEf9hKmNpQ7rS";
  const t1 = "tOnEx4yZw8vUq2pLk6Jh";
  const t2 = "tTwOm5nBc1xVz7aSd3Fg";
  const cases: [string, string][] = [
    [`${slug}/${t1}/${t2}/`, "-/-/-/"],
    [`http://other.test/${slug}/${t1}/${t2}/`, "http://other.test/-/-/-/"],
    [`/${slug};x/${t1}/${t2}/`, "/-;x/-/-/"],
    [`/${slug}/${t1};x/${t2};x`, "/-/-;x/-;x"],
    [`/${slug}%2F${t1}%2F${t2}/`, "/-%-%-/"],
    [`/${slug}\\${t1}\\${t2}`, "/-\\-\\-"],
    [`/${slug}%20/${t1}/${t2}`, "/-%20/-/-"],
    [`//app.localhost/${slug}/${t1}/${t2}/`, "//app.localhost/-/-/-/"],
    [`/x/y/z/${t1}/${t2}`, "/x/y/z/-/-"],
    [`http://${slug}/${t1}/${t2}/`, "http://-/-/-/"],
    [`/${slug}/${t1}/${t2}?${t1}`, "/-/-/-?-"],
  ];
  for (const [target, logged] of cases) assert.equal(withoutGateSegments(target), logged, target);
});
