/**
 * Scans like an attacker: every reply a client can reach under the DEFAULT config — each failure
 * kind a client can trigger, each lane, plain and TLS, the raw 400/431 — and every request a
 * backend receives, looked through for anything that names the product: its name in any case, its
 * version, `X-Portcullis-`, the failure table's codes and messages, the envelope's shape. The edge
 * runs as `main.ts serve` under the flags `main.ts flags` derives. The door's public side and the
 * hub's refusals to a caller that did not authenticate are scanned the same way.
 *
 * @module
 */
import assert from "node:assert/strict";
import { freePorts, Gateway, proofConfig, writeConfig } from "./fixtures/gateway.ts";
import { exchange, parseResponses, renderRequest, utf8 } from "./fixtures/http_client.ts";
import { findTokens, type ProductToken, productTokens } from "./fixtures/product_tokens.ts";
import { UpstreamFixture } from "./fixtures/upstream.ts";
import { withTlsEdge } from "./fixtures/tls_edge.ts";
import { TlsClient } from "./fixtures/certs.ts";
import { startTestHub } from "./fixtures/hub_in_process.ts";
import { ask, COVER, eventually, SAYS, startDoorHub, startTestDoor } from "./fixtures/door.ts";

/** The tenants the scan probes: one per failure a tenant's config can make a client meet. */
function scanTenants(backend: string, dead: string): Record<string, unknown>[] {
  const proxy = (name: string, url: string, extra: Record<string, unknown> = {}) => ({
    name,
    match: { prefix: `/${name}/` },
    proxy: { backends: [{ url }], rewrite: { strip_prefix: `/${name}` }, attempts: 1, ...extra },
  });
  return [{
    host: "shop.test",
    routes: [
      { name: "home", match: { path: "/" }, respond: { body: "shop" } },
      proxy("api", backend),
      proxy("dead", dead, { connect_ms: 500 }),
      proxy("slow", backend, { first_byte_ms: 200 }),
      { name: "closed", match: { prefix: "/closed/" }, maintenance: {}, respond: { body: "x" } },
    ],
    policies: {
      caps: { max_body_bytes: 16 },
      blocklist: { rules: [{ name: "admin", path: "^/wp-admin", action: "404" }] },
      waf: {},
    },
  }, {
    host: "rate.test",
    routes: [{ match: { path: "/" }, respond: { body: "rate" } }],
    policies: { rate_limit: { per_second: 0.001, burst: 1 } },
  }, { host: "off.test", enabled: false }];
}

/** What one probe sent and what came back, as bytes. */
interface Probe {
  readonly label: string;
  readonly wire: string | Uint8Array;
  /** The status the probe exists to reach (so a probe that missed its path fails the test). */
  readonly status: number;
}

function get(label: string, host: string, path: string, status: number, extra = {}): Probe {
  const headers: [string, string][] = [["Host", host]];
  return { label, status, wire: renderRequest({ path, headers, ...extra }) };
}

/** Every probe of the public lane (plain). */
function publicProbes(): Probe[] {
  return [
    get("unknown host (421)", "nobody.test", "/", 421),
    get("no route (404)", "shop.test", "/nothing", 404),
    get("tenant disabled", "off.test", "/", 404),
    get("blocklist rule", "shop.test", "/wp-admin/", 404),
    get("waf", "shop.test", "/api/x?q=1'%20OR%20'1'='1", 403),
    get("maintenance (503)", "shop.test", "/closed/", 503),
    get("upstream unreachable (502)", "shop.test", "/dead/", 502),
    get("upstream timeout (504)", "shop.test", "/slow/slow/3000", 504),
    get("ambiguous path (400)", "shop.test", "/a%2fb", 400),
    get("a body on GET (400)", "shop.test", "/", 400, { body: "x" }),
    get("payload too large (413)", "shop.test", "/api/echo", 413, {
      method: "POST",
      body: "x".repeat(64),
    }),
    get("rate limit, first", "rate.test", "/", 200),
    get("rate limit (429)", "rate.test", "/", 429),
    get("target too long (414)", "shop.test", `/${"a".repeat(9000)}`, 414),
    {
      label: "header fields too large (431)",
      status: 431,
      wire: `GET / HTTP/1.1\r\nHost: shop.test\r\nX-Big: ${"b".repeat(20_000)}\r\n\r\n`,
    },
    { label: "malformed head (400)", status: 400, wire: "GARBAGE\r\n\r\n" },
    get("healthz", "shop.test", "/healthz", 200),
    get("proxied answer", "shop.test", "/api/echo", 200),
  ];
}

/** Sends each probe on its own connection and returns the transcripts, asserting each status. */
async function run(port: number, probes: readonly Probe[]): Promise<[string, string][]> {
  const seen: [string, string][] = [];
  for (const probe of probes) {
    const text = await exchange(port, probe.wire);
    const [response] = parseResponses(text);
    assert.equal(response?.status, probe.status, `${probe.label}: ${text.slice(0, 300)}`);
    seen.push([probe.label, utf8(text)]);
  }
  return seen;
}

/** A failure (4xx/5xx) that carries a request id the operator did not ask for. */
const UNASKED_ID: ProductToken = {
  what: "a request id on a failure (errors.request_id is off by default)",
  pattern: /^HTTP\/1\.1 [45]\d\d [^]*?\r\nx-request-id:/im,
};

function assertClean(tokens: readonly ProductToken[], seen: readonly [string, string][]): void {
  const all = [...tokens, UNASKED_ID];
  const findings = seen.flatMap(([where, text]) => findTokens(all, where, text));
  assert.deepEqual(findings, [], findings.join("\n"));
}

Deno.test("opsec scan: no reply of an edge under the default config, nor any request its backend receives, names the product", async () => {
  const tokens = await productTokens();
  const upstream = await UpstreamFixture.start();
  const [deadPort, ...ports] = freePorts(4);
  const lanes = { public: ports[0], local_health: ports[1], provider_health: ports[2] };
  const config = proofConfig(lanes, {
    timeouts: { header_ms: 500, idle_ms: 30000 },
    egress: { direct: [`127.0.0.1:${upstream.port}`, `127.0.0.1:${deadPort}`] },
  });
  delete config.errors;
  const backend = `http://127.0.0.1:${upstream.port}`;
  const dead = `http://127.0.0.1:${deadPort}`;
  const dir = await writeConfig(config, scanTenants(backend, dead));
  const gateway = await Gateway.start(dir, lanes);
  try {
    const seen = await run(lanes.public, publicProbes());
    // The head timeout: a head that never ends is closed after header_ms, with no reply at all.
    const slow = await exchange(lanes.public, "GET / HTTP/1.1\r\nHost: shop.test\r\n");
    assert.equal(slow, "", "a head timeout is closed unanswered");
    seen.push(...await run(lanes.provider_health, [get("provider 404", "x", "/nothing", 404)]));
    let flooded = "";
    for (let i = 0; i < 120 && !flooded; i++) {
      const text = await exchange(lanes.provider_health, renderRequest({ path: "/healthz" }));
      if (/^HTTP\/1\.1 429 /.test(text)) flooded = text;
    }
    assert.notEqual(flooded, "", "the provider lane's rate budget was never exhausted");
    seen.push(["provider lane rate budget (429)", flooded]);
    for (const [index, request] of upstream.seen.entries()) {
      seen.push([`backend request ${index} (${request.url})`, request.rawHeaders.join("\n")]);
    }
    assert.ok(upstream.seen.length >= 1, "the backend saw no request");
    assertClean(tokens, seen);
  } finally {
    await gateway.dispose();
    await upstream.stop();
  }
});

Deno.test("opsec scan: an edge's TLS public lane answers its failures without naming the product", async () => {
  const tokens = await productTokens();
  await withTlsEdge({
    names: ["site.test"],
    edit: (config) => delete config.errors,
  }, async (t, pki) => {
    const seen: [string, string][] = [];
    for (
      const [label, host, path, status] of [
        ["TLS unknown host", "nobody.test", "/", 421],
        ["TLS no route", "site.test", "/nothing", 404],
      ] as const
    ) {
      const client = await TlsClient.open(t.ports.public, {
        servername: "site.test",
        ca: [pki.ca.certPem],
      });
      client.write(renderRequest({ path, headers: [["Host", host]] }));
      const text = await client.untilClosed();
      await client.close();
      assert.match(text, new RegExp(`^HTTP/1\\.1 ${status} `), label);
      seen.push([label, text]);
    }
    assertClean(tokens, seen);
  });
});

Deno.test("opsec scan: the hub's refusals to a caller that did not authenticate name nothing", async () => {
  const tokens = await productTokens();
  const hub = await startTestHub({ edit: (config) => delete config.errors });
  try {
    const seen: [string, string][] = [];
    for (
      const [label, path, init] of [
        ["no token", "/v1/config/stream?node_id=edge-1", {}],
        ["wrong token", "/v1/config/stream?node_id=edge-1", {
          headers: { authorization: "Bearer x" },
        }],
        ["unknown path", "/admin", {}],
        ["wrong method", "/v1/config/stream?node_id=edge-1", { method: "DELETE" }],
        ["registration", "/v1/nodes/register", { method: "POST", body: "{}" }],
      ] as const
    ) {
      const response = await fetch(new URL(path, hub.url), init as RequestInit);
      const headers = [...response.headers].map(([n, v]) => `${n}: ${v}`).join("\n");
      const body = await response.text();
      assert.ok(response.status >= 400, `${label}: ${response.status}`);
      seen.push([`hub ${label} (${response.status})`, `${headers}\n\n${body}`]);
    }
    assertClean(tokens, seen);
  } finally {
    await hub.dispose();
  }
});

Deno.test("opsec scan: a door's misses, hits and refused methods name nothing", async () => {
  const tokens = await productTokens();
  const hub = await startDoorHub({
    mirrors: [{ host: "m1.example", region: "DE" }],
    slugs: [{ slug: "reading-room-1", strategy: "first", mirrors: ["m1.example"] }],
  });
  hub.client.set("m1.example", SAYS.live);
  await hub.service.probeNow();
  const door = await startTestDoor(hub);
  try {
    await eventually("the door's first view", async () => {
      return (await ask(door.port, "/reading-room-1")).status === 302;
    });
    const seen: [string, string][] = [];
    for (
      const [label, path, method] of [
        ["door cover", "/", "GET"],
        ["door miss", "/no-such-slug", "GET"],
        ["door hit", "/reading-room-1", "GET"],
        ["door refused method", "/", "POST"],
      ] as const
    ) {
      const answer = await ask(door.port, path, method);
      const headers = [...answer.headers].map(([n, v]) => `${n}: ${v}`).join("\n");
      seen.push([`${label} (${answer.status})`, `${headers}\n\n${answer.body}`]);
    }
    assert.equal((await ask(door.port, "/no-such-slug")).body, COVER);
    assertClean(tokens, seen);
  } finally {
    await door.door.close();
    await hub.dispose();
    await Deno.remove(door.dir, { recursive: true }).catch(() => {});
  }
});
