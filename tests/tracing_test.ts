/**
 * Tracing that keeps the secrets, proved on the real gateway under its derived flags with Deno's
 * built-in OpenTelemetry exporting to a collector on loopback: nothing exported — spans, metrics,
 * logs — names the tenant host or the query, and no span the client's address; the runtime's own
 * HTTP spans never leave; the request's trace is the gateway's own (or a trusted proxy's,
 * continued), and the upstream is told the gateway's `traceparent`. A configuration in which the
 * runtime would export its spans is refused at boot.
 *
 * @module
 */
import assert from "node:assert/strict";
import { AddressSet } from "../src/request/cidr.ts";
import { upstreamHeaders } from "../src/proxy/hygiene.ts";
import { formatTraceparent, parseTraceparent } from "../src/observe/trace_context.ts";
import { request } from "./fixtures/http_client.ts";
import { freePorts, Gateway, proofConfig, writeConfig } from "./fixtures/gateway.ts";
import { OtlpCollector, type OtlpSpan } from "./fixtures/otlp_collector.ts";
import { UpstreamFixture } from "./fixtures/upstream.ts";
import { messages } from "./fixtures/diag_lines.ts";

const TENANT = "secret-tenant.tracing.test";
const SECRET = "SECRET123";
const CLIENT_TRACE = "0af7651916cd43dd8448eb211c80319c";
const CLIENT_SPAN = "b7ad6b7169203331";
const CLIENT_TRACEPARENT = `00-${CLIENT_TRACE}-${CLIENT_SPAN}-01`;
const SERVER = 2;
const CLIENT = 3;

/** What the README asks of a traced edge: the runtime's own spans are never recorded. */
const REQUIRED: Record<string, string> = {
  OTEL_TRACES_SAMPLER: "parentbased_always_off",
  OTEL_PROPAGATORS: "none",
};

/** Tracing on, exported as OTLP/JSON so the test can read what is sent. */
const TRACED: Record<string, string> = {
  OTEL_DENO: "true",
  OTEL_EXPORTER_OTLP_PROTOCOL: "http/json",
};

/**
 * Short export intervals, so a test need not wait seconds. Measured on Deno 2.9.6: with these, a
 * process now and then never finishes exiting (its exit flush waits forever), so a test that
 * waits for an exit leaves them out, and one that stops the gateway kills it if it must.
 */
const QUICK_EXPORTS: Record<string, string> = {
  OTEL_BSP_SCHEDULE_DELAY: "100",
  OTEL_BLRP_SCHEDULE_DELAY: "100",
  OTEL_METRIC_EXPORT_INTERVAL: "200",
};

interface Traced {
  readonly gateway: Gateway;
  readonly upstream: UpstreamFixture;
  readonly collector: OtlpCollector;
}

/**
 * Boots a gateway proxying `/api/` of {@link TENANT} to a recording upstream, traced, with
 * `settings` in place of {@link REQUIRED} and {@link QUICK_EXPORTS} unless `quick` is false.
 */
async function withTracedGateway(
  options: { trusted?: boolean; settings?: Record<string, string>; quick?: boolean },
  body: (t: Traced) => Promise<void>,
): Promise<void> {
  const upstream = await UpstreamFixture.start();
  const collector = OtlpCollector.start();
  const saltDir = await Deno.makeTempDir({ prefix: "portcullis-salt-" });
  await Deno.writeTextFile(`${saltDir}/salt`, "tracing-test-salt-0123456789\n", { mode: 0o600 });
  await Deno.chmod(`${saltDir}/salt`, 0o600);
  const [publicPort, health] = freePorts(2);
  const ports = { public: publicPort, local_health: health, provider_health: 0 };
  const dir = await writeConfig(
    proofConfig(ports, {
      egress: { direct: [`127.0.0.1:${upstream.port}`] },
      observe: { salt_file: `${saltDir}/salt` },
      ...(options.trusted ? { trusted_proxies: ["127.0.0.0/8"] } : {}),
    }),
    [{
      host: TENANT,
      routes: [{
        name: "api",
        match: { prefix: "/api/" },
        proxy: { backends: [{ url: `http://127.0.0.1:${upstream.port}` }] },
      }],
    }],
  );
  let gateway: Gateway | undefined;
  try {
    gateway = await Gateway.start(dir, ports, undefined, {
      env: {
        ...TRACED,
        ...(options.quick === false ? {} : QUICK_EXPORTS),
        ...(options.settings ?? REQUIRED),
        OTEL_EXPORTER_OTLP_ENDPOINT: collector.endpoint,
      },
    });
    await body({ gateway, upstream, collector });
  } finally {
    await gateway?.dispose();
    await Deno.remove(dir.dir, { recursive: true }).catch(() => {});
    await Deno.remove(saltDir, { recursive: true });
    await collector.stop();
    await upstream.stop();
  }
}

/** Sends the attacker's request: a tenant host, a secret in the query, a client trace context. */
async function sendTraced(t: Traced): Promise<void> {
  const response = await request(t.gateway.ports.public, {
    path: `/api/q?token=${SECRET}&x=1`,
    headers: [
      ["Host", TENANT],
      ["traceparent", CLIENT_TRACEPARENT],
      ["tracestate", "client=state"],
    ],
  });
  assert.equal(response.status, 200, response.body);
}

/**
 * Waits for a SERVER and a CLIENT span of the request, then stops the gateway (an exit flushes
 * what it holds; it is killed after 5 s).
 */
async function exported(t: Traced): Promise<OtlpSpan[]> {
  await t.collector.spansWhen((all) =>
    all.some(isRequestRoot) && all.some((s) => s.kind === CLIENT)
  );
  await t.gateway.dispose();
  return t.collector.spans();
}

function isRequestRoot(span: OtlpSpan): boolean {
  return span.kind === SERVER && span.attributes["url.path"] === "/api/q";
}

/** The request's SERVER span and the CLIENT span of its upstream attempt. */
function requestSpans(spans: OtlpSpan[]): { root: OtlpSpan; attempt: OtlpSpan } {
  const root = spans.find(isRequestRoot);
  assert.ok(root, `no SERVER span of the request among ${JSON.stringify(spans)}`);
  const attempt = spans.find((s) => s.kind === CLIENT && s.parentSpanId === root.spanId);
  assert.ok(attempt, `no CLIENT span under the request's among ${JSON.stringify(spans)}`);
  return { root, attempt };
}

/** The one traceparent the upstream received. */
function upstreamTraceparent(upstream: UpstreamFixture): string {
  const values = upstream.headersOf().get("traceparent") ?? [];
  assert.equal(values.length, 1, `the upstream saw ${values.length} traceparent fields`);
  return values[0];
}

/** Asserts that no export carries the tenant host or the secret, and no span a client address. */
function assertNothingLeaks(collector: OtlpCollector): void {
  assert.ok(collector.exports.some((e) => e.path === "/v1/traces"), "no trace was exported");
  for (const { path, text } of collector.exports) {
    assert.ok(!text.includes(TENANT), `${path} names the tenant host`);
    assert.ok(!text.includes(SECRET), `${path} carries the query`);
  }
  for (const span of collector.spans()) {
    const text = JSON.stringify(span);
    assert.equal(span.scope, "portcullis", `the runtime exported a span of its own: ${text}`);
    assert.ok(!text.includes("127.0.0.1"), `a span carries an address: ${text}`);
    for (const key of ["client.address", "url.query", "url.full"]) {
      assert.ok(!(key in span.attributes), `a span carries ${key}: ${text}`);
    }
  }
}

Deno.test("tracing on the real gateway: nothing exported names the tenant, the query or the client, and an untrusted client's trace is not continued", async () => {
  await withTracedGateway({}, async (t) => {
    await sendTraced(t);
    // A scrape: the runtime used to export a span of its own for each.
    assert.equal((await request(t.gateway.ports.local_health, { path: "/metrics" })).status, 200);
    const spans = await exported(t);
    assertNothingLeaks(t.collector);
    const { root, attempt } = requestSpans(spans);

    assert.notEqual(root.traceId, CLIENT_TRACE, "an untrusted client's trace was continued");
    assert.equal(root.name, "GET api");
    assert.equal(root.attributes["http.request.method"], "GET");
    assert.equal(root.attributes["url.scheme"], "http");
    assert.equal(root.attributes["http.route"], "api");
    assert.equal(root.attributes["http.response.status_code"], 200);
    assert.match(String(root.attributes["server.address"]), /^[0-9a-f]{16}$/);

    assert.equal(attempt.traceId, root.traceId);
    assert.equal(attempt.name, "GET");
    assert.equal(attempt.attributes["http.response.status_code"], 200);
    assert.ok(!("http.request.resend_count" in attempt.attributes), "a first attempt is no resend");
    assert.match(String(attempt.attributes["server.address"]), /^[0-9a-f]{16}$/);

    const sent = parseTraceparent(upstreamTraceparent(t.upstream));
    assert.equal(sent?.traceId, root.traceId, "the upstream was told another trace");
    assert.equal(sent?.spanId, attempt.spanId, "the upstream's parent is the attempt's span");
    assert.equal(t.upstream.headersOf().get("tracestate"), undefined, "an untrusted tracestate");
  });
});

Deno.test("tracing on the real gateway: a trusted proxy's traceparent is continued, and the upstream is told the gateway's span in that trace", async () => {
  await withTracedGateway({ trusted: true }, async (t) => {
    await sendTraced(t);
    const spans = await exported(t);
    assertNothingLeaks(t.collector);
    const { root, attempt } = requestSpans(spans);
    assert.equal(root.traceId, CLIENT_TRACE);
    assert.equal(root.parentSpanId, CLIENT_SPAN);
    const sent = parseTraceparent(upstreamTraceparent(t.upstream));
    assert.equal(sent?.traceId, CLIENT_TRACE);
    assert.equal(sent?.spanId, attempt.spanId);
    assert.deepEqual(t.upstream.headersOf().get("tracestate"), ["client=state"]);
  });
});

Deno.test("boot is refused, naming what to set, when Deno would export its own spans of requests", async () => {
  const cases: [Record<string, string>, string[], string[]][] = [
    [
      {},
      ['"OTEL_TRACES_SAMPLER=parentbased_always_off"', '"OTEL_PROPAGATORS=none"'],
      [],
    ],
    [
      { OTEL_TRACES_SAMPLER: "parentbased_always_off" },
      ['"OTEL_PROPAGATORS=none"'],
      ["OTEL_TRACES_SAMPLER"],
    ],
    [
      { OTEL_TRACES_SAMPLER: "parentbased_always_on", OTEL_PROPAGATORS: "none" },
      ['"OTEL_TRACES_SAMPLER=parentbased_always_off"'],
      ["OTEL_PROPAGATORS"],
    ],
  ];
  for (const [settings, named, unnamed] of cases) {
    const refusal = await withTracedGateway({ settings, quick: false }, () => {
      throw new Error(`the gateway booted with ${JSON.stringify(settings)}`);
    }).then(() => "", (error: Error) => error.message);
    // Refused means the refusal is said and the gateway never gets ready (its exit is Deno's:
    // see QUICK_EXPORTS).
    assert.match(refusal, /gateway (exited before ready|not ready in 20 s)/, refusal);
    const said = messages(refusal);
    assert.match(said, /^boot refused$/m, refusal);
    const line = said.split("\n").find((l) => l.startsWith("Tracing is on"));
    assert.ok(line, refusal);
    for (const setting of named) assert.ok(line.includes(setting), `${setting} in: ${line}`);
    for (const name of unnamed) assert.ok(!line.includes(name), `${name} in: ${line}`);
  }
});

Deno.test("upstreamHeaders() passes a client's trace context only from a trusted proxy, and writes the gateway's own traceparent in place of any", () => {
  const raw = ["Host", "a.example", "traceparent", CLIENT_TRACEPARENT, "TraceState", "k=v"];
  const base = {
    trusted: AddressSet.of(["10.0.0.0/8"]),
    proto: "http",
    host: "a.example",
    requestId: "r1",
    tenant: "a.example",
    route: "api",
    authority: "127.0.0.1:80",
    upgrade: false,
  } as const;
  const fields = (headers: string[], name: string) =>
    headers.filter((_, i) => i % 2 === 1 && headers[i - 1].toLowerCase() === name);
  const own = "00-11111111111111111111111111111111-2222222222222222-01";

  const untrusted = upstreamHeaders(raw, { ...base, peer: "203.0.113.9" });
  assert.deepEqual(fields(untrusted, "traceparent"), []);
  assert.deepEqual(fields(untrusted, "tracestate"), []);
  const trusted = upstreamHeaders(raw, { ...base, peer: "10.0.0.2" });
  assert.deepEqual(fields(trusted, "traceparent"), [CLIENT_TRACEPARENT]);
  assert.deepEqual(fields(trusted, "tracestate"), ["k=v"]);

  const tracedUntrusted = upstreamHeaders(raw, { ...base, peer: "203.0.113.9", traceparent: own });
  assert.deepEqual(fields(tracedUntrusted, "traceparent"), [own]);
  assert.deepEqual(fields(tracedUntrusted, "tracestate"), []);
  const tracedTrusted = upstreamHeaders(raw, { ...base, peer: "10.0.0.2", traceparent: own });
  assert.deepEqual(fields(tracedTrusted, "traceparent"), [own]);
  assert.deepEqual(fields(tracedTrusted, "tracestate"), ["k=v"]);
});

Deno.test("parseTraceparent() reads W3C version 00 exactly and refuses what a receiver must not continue", () => {
  const context = parseTraceparent(CLIENT_TRACEPARENT);
  assert.deepEqual(context, {
    traceId: CLIENT_TRACE,
    spanId: CLIENT_SPAN,
    traceFlags: 1,
    isRemote: true,
  });
  assert.equal(formatTraceparent(context!), CLIENT_TRACEPARENT);
  for (
    const bad of [
      `00-${CLIENT_TRACE}-${CLIENT_SPAN}-01-extra`,
      `ff-${CLIENT_TRACE}-${CLIENT_SPAN}-01`,
      `00-${"0".repeat(32)}-${CLIENT_SPAN}-01`,
      `00-${CLIENT_TRACE}-${"0".repeat(16)}-01`,
      `00-${CLIENT_TRACE.toUpperCase()}-${CLIENT_SPAN}-01`,
      `${CLIENT_TRACEPARENT}, ${CLIENT_TRACEPARENT}`,
      "",
    ]
  ) assert.equal(parseTraceparent(bad), undefined, bad);
  assert.equal(parseTraceparent(`01-${CLIENT_TRACE}-${CLIENT_SPAN}-00-later`)?.traceFlags, 0);
});
