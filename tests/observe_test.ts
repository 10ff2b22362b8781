/**
 * What an operator sees of a request: its trace (through `@opentelemetry/api`, captured here by an
 * in-memory provider), its metrics on `/metrics` and its access-log line agree on request id, lane
 * and status; none of them carries the plain tenant host or the full client address; the tenant is
 * a salted 16-hex-digit label, or absent without a salt.
 *
 * @module
 */
import assert from "node:assert/strict";
import { SpanKind, trace } from "@opentelemetry/api";
import {
  BasicTracerProvider,
  InMemorySpanExporter,
  type ReadableSpan,
  SimpleSpanProcessor,
} from "@opentelemetry/sdk-trace-base";
import { TenantLabels } from "../src/observe/tenant_label.ts";
import { apiRoute, SHOP, withProxyEdge } from "./fixtures/proxy_edge.ts";
import { request } from "./fixtures/http_client.ts";
import { waitFor, withEdge } from "./fixtures/in_process.ts";
import { certEntry, TestPki } from "./fixtures/certs.ts";
import { freePorts, Gateway, proofConfig, writeConfig } from "./fixtures/gateway.ts";
import { messages } from "./fixtures/diag_lines.ts";

const SALT = "portcullis-test-salt-0123456789";

async function saltFile(): Promise<string> {
  const file = await Deno.makeTempFile({ prefix: "portcullis-salt-" });
  await Deno.writeTextFile(file, `${SALT}\n`);
  return file;
}

/** Runs `body` with an in-memory tracer provider registered as the global one. */
async function withSpans(body: (exporter: InMemorySpanExporter) => Promise<void>): Promise<void> {
  const exporter = new InMemorySpanExporter();
  const provider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });
  assert.ok(trace.setGlobalTracerProvider(provider), "no other provider was registered");
  try {
    await body(exporter);
  } finally {
    trace.disable();
    await provider.shutdown();
  }
}

function attributesOf(span: ReadableSpan): Record<string, unknown> {
  return { ...span.attributes };
}

Deno.test("a request's trace, metrics and access-log line agree, and none names the tenant or the client", async () => {
  const salt = await saltFile();
  const label = new TenantLabels(new TextEncoder().encode(SALT)).label(SHOP);
  await withSpans(async (exporter) => {
    await withProxyEdge({
      socks: [],
      egress: (site) => ({ direct: [new URL(site.backend).host] }),
      edit: (config) => config.observe = { salt_file: salt },
    }, async (p) => {
      const response = await p.send({ path: "/api/items?secret=q" });
      assert.equal(response.status, 200);
      const requestId = response.headers["x-request-id"];
      await waitFor(() => p.t.accessLines.length, (n) => n >= 1);

      // The access log.
      const line = JSON.parse(p.t.accessLines[0]);
      assert.equal(line.request_id, requestId);
      assert.equal(line.lane, "public");
      assert.equal(line.status, 200);
      assert.equal(line.tenant, label);
      assert.equal(line.route, "api");
      assert.equal(line.client, "127.0.0.0", "the last octet is zeroed");
      assert.equal(line.attempts, 1);
      assert.ok(line.upstream_ms >= 0 && line.duration_ms >= line.upstream_ms);

      // The trace: one root with the phases under it.
      const spans = exporter.getFinishedSpans();
      const root = spans.find((s) => s.name === "GET api")!;
      assert.ok(root, spans.map((s) => s.name).join(", "));
      const rootAttributes = attributesOf(root);
      assert.equal(rootAttributes["portcullis.request_id"], requestId);
      assert.equal(rootAttributes["portcullis.lane"], "public");
      assert.equal(rootAttributes["http.response.status_code"], 200);
      assert.equal(rootAttributes["server.address"], label);
      assert.equal(rootAttributes["http.route"], "api");
      assert.equal(rootAttributes["url.path"], "/api/items", "the path, without its query");
      const children = spans.filter((s) =>
        s.parentSpanContext?.spanId === root.spanContext().spanId
      );
      assert.deepEqual(
        children.map((s) => s.name).sort(),
        ["GET", "portcullis.admission", "portcullis.response", "portcullis.route"],
      );
      const upstream = children.find((s) => s.name === "GET")!;
      assert.equal(attributesOf(upstream)["portcullis.egress"], "direct");

      // The metrics.
      const metrics = (await request(p.t.ports.local_health, { path: "/metrics" })).body;
      assert.match(
        metrics,
        new RegExp(
          `^portcullis_requests_total\\{lane="public",tenant="${label}",route="api",class="2xx"\\} 1$`,
          "m",
        ),
      );
      assert.match(metrics, /^portcullis_upstream_seconds_count\{lane="public"\} 1$/m);
      assert.match(metrics, /^portcullis_gateway_seconds_count\{lane="public"\} 1$/m);
      assert.match(metrics, /^portcullis_tenant_labels 1$/m);
      assert.match(metrics, /^portcullis_config_generation 1$/m);

      // Nowhere the plain host, the full client address or the query.
      const spanText = JSON.stringify(spans.map((s) => ({ name: s.name, a: s.attributes })));
      for (
        const [where, text] of [["trace", spanText], ["log", p.t.accessLines.join("\n")], [
          "metrics",
          metrics,
        ]]
      ) {
        assert.ok(!text.includes(SHOP), `${where} names the tenant host`);
        assert.ok(!text.includes("127.0.0.1"), `${where} carries the client address`);
        assert.ok(!text.includes("secret=q"), `${where} carries the query`);
      }
      // local_health's own requests (the /metrics read) are never logged.
      assert.equal(p.t.accessLines.length, 1);
    });
  });
  await Deno.remove(salt);
});

Deno.test("without a salt, tenants are withheld from metrics and logs, and the edge says so once", async () => {
  await withProxyEdge({
    socks: [],
    egress: (site) => ({ direct: [new URL(site.backend).host] }),
  }, async (p) => {
    assert.equal((await p.send({ path: "/api/x" })).status, 200);
    assert.equal((await p.send({ path: "/nothing-here" })).status, 404);
    await waitFor(() => p.t.accessLines.length, (n) => n >= 2);
    const [ok, missing] = p.t.accessLines.map((line) => JSON.parse(line));
    assert.equal(ok.tenant, "-");
    assert.equal(missing.status, 404);
    assert.equal(missing.outcome, "no_route");
    const metrics = (await request(p.t.ports.local_health, { path: "/metrics" })).body;
    assert.match(metrics, /^portcullis_requests_total\{lane="public",class="2xx"\} 1$/m);
    assert.match(metrics, /^portcullis_requests_total\{lane="public",class="4xx"\} 1$/m);
    assert.doesNotMatch(metrics, /tenant="/);
    assert.match(metrics, /^portcullis_tenant_labels 0$/m);
    const warnings = p.t.lines.filter((line) => line.includes("observe.salt_file is not set"));
    assert.equal(warnings.length, 1);
  });
});

Deno.test("an unreadable salt file is named once and never falls back to plain hosts", async () => {
  await withProxyEdge({
    socks: [],
    egress: (site) => ({ direct: [new URL(site.backend).host] }),
    edit: (config) => config.observe = { salt_file: "/nonexistent/portcullis-salt" },
  }, async (p) => {
    assert.equal((await p.send({ path: "/api/x" })).status, 200);
    await waitFor(() => p.t.accessLines.length, (n) => n >= 1);
    assert.equal(JSON.parse(p.t.accessLines[0]).tenant, "-");
    const warnings = p.t.lines.filter((line) => line.includes("/nonexistent/portcullis-salt"));
    assert.equal(warnings.length, 1, p.t.lines.join("\n"));
  });
});

Deno.test("access log sampling keeps every error and drops a share of the rest", async () => {
  await withProxyEdge({
    socks: [],
    egress: (site) => ({ direct: [new URL(site.backend).host] }),
    edit: (config) => config.observe = { access_log: { sample: 0 } },
  }, async (p) => {
    for (let i = 0; i < 5; i++) assert.equal((await p.send({ path: "/api/x" })).status, 200);
    assert.equal((await p.send({ path: "/missing" })).status, 404);
    await waitFor(() => p.t.accessLines.length, (n) => n >= 1);
    await new Promise((resolve) => setTimeout(resolve, 50));
    const statuses = p.t.accessLines.map((line) => JSON.parse(line).status);
    assert.deepEqual(statuses, [404], "sample 0: only the outcome is logged");
  });
});

Deno.test("log_level error keeps boot lines and warnings off stderr", async () => {
  const [publicPort] = freePorts(1);
  const ports = { public: publicPort, local_health: 0, provider_health: 0 };
  const quiet = await Gateway.start(
    await writeConfig(proofConfig(ports, { observe: { log_level: "error" } })),
    ports,
  );
  try {
    assert.equal(
      (await request(publicPort, { path: "/", headers: [["Host", "demo.test"]] })).status,
      200,
    );
  } finally {
    await quiet.dispose();
  }
  assert.doesNotMatch(quiet.stderr, /listening on/);
  assert.doesNotMatch(quiet.stderr, /salt_file/);
  assert.match(messages(quiet.stderr), /^ready: node /m);
});

Deno.test("certificate expiry is a Unix-time metric labelled by the hashed name, or by position without a salt", async () => {
  const pki = await TestPki.create();
  const salt = await saltFile();
  try {
    const week = 7 * 24 * 3600 * 1000;
    const cert = await pki.issue("secret-tenant.test", { lifetimeMs: week });
    for (const salted of [true, false]) {
      await withEdge({
        lanes: ["public", "local_health"],
        tenants: [{ host: "secret-tenant.test", routes: [] }],
        edit(config) {
          config.lanes.public.tls = { certificates: [certEntry(cert, true)] };
          if (salted) config.observe = { salt_file: salt };
        },
      }, async (t) => {
        const metrics = (await request(t.ports.local_health, { path: "/metrics" })).body;
        const expected = salted
          ? new TenantLabels(new TextEncoder().encode(SALT)).label("secret-tenant.test")
          : "1";
        const match = new RegExp(
          `^portcullis_tls_certificate_not_after_timestamp_seconds\\{certificate="${expected}"\\} (\\d+)$`,
          "m",
        ).exec(metrics);
        assert.ok(match, metrics.split("\n").filter((l) => l.includes("tls")).join("\n"));
        // A Unix timestamp (the certificate's notAfter), not the seconds left.
        assert.equal(Number(match[1]), Math.floor(cert.notAfter.getTime() / 1000));
        assert.ok(!metrics.includes("secret-tenant"), "the certificate's name is not shown");
      });
    }
  } finally {
    await pki.dispose();
    await Deno.remove(salt);
  }
});

Deno.test("a retried request shows each attempt: two upstream spans, attempts 2 in the log", async () => {
  await withSpans(async (exporter) => {
    await withProxyEdge({
      socks: [{ mode: "refuse" }, {}], // a fresh pool tries instance 0 first: it refuses
      routes: (site) => [apiRoute(site)],
    }, async (p) => {
      const response = await p.send({ path: "/api/echo" });
      assert.equal(response.status, 200);
      await waitFor(() => p.t.accessLines.length, (n) => n >= 1);
      const line = JSON.parse(p.t.accessLines[0]);
      assert.deepEqual([line.attempts, line.retries, line.status], [2, 1, 200]);
      const spans = exporter.getFinishedSpans();
      const attempts = spans.filter((s) => s.kind === SpanKind.CLIENT);
      assert.deepEqual(attempts.map((s) => s.attributes["http.request.resend_count"]), [
        undefined,
        1,
      ]);
      assert.deepEqual(
        attempts.map((s) => s.attributes["portcullis.egress"]),
        p.socks.map((s) => `127.0.0.1:${s.port}`),
      );
      assert.ok(attempts[0].attributes["portcullis.outcome"], "the failed attempt says why");
    });
  });
});
