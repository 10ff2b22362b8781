/**
 * What an edge's access-log line says about a request: the canonical path every phase saw (its
 * query only when `observe.access_log.query` asks for it), the protocol, and the user agent cut
 * and with its control characters escaped.
 *
 * @module
 */
import assert from "node:assert/strict";
import { withProxyEdge } from "./fixtures/proxy_edge.ts";
import { waitFor } from "./fixtures/in_process.ts";
import type { ConfigObject } from "./fixtures/in_process.ts";

/** The edge's access-log lines so far, parsed. */
type Lines = Record<string, unknown>[];

function direct(site: { backend: string }): ConfigObject {
  return { direct: [new URL(site.backend).host] };
}

Deno.test("access log: the canonical path without its query, the protocol and the user agent", async () => {
  await withProxyEdge({ socks: [], egress: direct }, async (p) => {
    const agent = `probe\u009b31m/1.0 ${"x".repeat(300)}`;
    const response = await p.send({
      path: "/api//items/./%7Euser/../list?token=s3cret&page=2",
      headers: [["User-Agent", agent]],
    });
    assert.equal(response.status, 200, response.body);
    await waitFor(() => p.t.accessLines.length, (n) => n >= 1);
    const [line] = p.t.accessLines.map((text) => JSON.parse(text)) as Lines;
    assert.equal(line.path, "/api/items/list", "merged, dots resolved, no query");
    assert.equal(line.protocol, "HTTP/1.1");
    // The client sent UTF-8 (C2 9B); node:http reads header bytes as latin1: Â, then the C1 CSI.
    assert.equal(line.user_agent, `probe\u00c2\\x9b31m/1.0 ${"x".repeat(110)}`);
    assert.equal((line.user_agent as string).length, 128);
    assert.ok(!p.t.accessLines[0].includes("s3cret"), "the query is not logged by default");
    const keys = Object.keys(line);
    assert.deepEqual(keys.slice(keys.indexOf("method"), keys.indexOf("method") + 4), [
      "method",
      "path",
      "protocol",
      "status",
    ]);
    assert.equal(keys.at(-1), "user_agent");
  });
});

Deno.test("access log: observe.access_log.query: true keeps the query; no User-Agent, no field", async () => {
  await withProxyEdge({
    socks: [],
    egress: direct,
    edit: (config) => config.observe = { access_log: { query: true } },
  }, async (p) => {
    const response = await p.send({ path: "/api/./items?page=2&q=a%20b", headers: [] });
    assert.equal(response.status, 200, response.body);
    const missing = await p.send({ path: "/nowhere?x=1" });
    assert.equal(missing.status, 404);
    await waitFor(() => p.t.accessLines.length, (n) => n >= 2);
    const lines = p.t.accessLines.map((text) => JSON.parse(text)) as Lines;
    assert.deepEqual(lines.map((line) => line.path), ["/api/items?page=2&q=a%20b", "/nowhere?x=1"]);
    assert.ok(lines.every((line) => !("user_agent" in line)), JSON.stringify(lines));
  });
});

Deno.test("access log: observe.access_log.query must be true or false", async () => {
  const { loadConfig } = await import("../src/config/load.ts");
  const { writeConfig, freePorts, proofConfig } = await import("./fixtures/gateway.ts");
  const [publicPort] = freePorts(1);
  const dir = await writeConfig(
    proofConfig({ public: publicPort, local_health: 0, provider_health: 0 }, {
      observe: { access_log: { query: "yes" } },
    }),
  );
  try {
    await assert.rejects(
      () => loadConfig(dir.config),
      /observe\.access_log\.query: Expected true or false \(got "yes"\)/,
    );
  } finally {
    await Deno.remove(dir.dir, { recursive: true });
  }
});
