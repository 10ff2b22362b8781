/**
 * Client addresses are written down only through `anonymizeIp` (src/observe/anonymize.ts): the
 * static scan (tests/fixtures/address_scan.ts) finds no module under src/, lanes/, main.ts or
 * mod.ts that formats one itself, and catches each way of doing so when planted; and at runtime a
 * request's access-log line, the edge's diagnostics (policy refusals, a TTL block), its spans and
 * the hub's refusal lines show the /24 or /64 only, never the whole address, for IPv4, IPv6 and
 * IPv4-mapped peers, and for addresses a trusted proxy forwards.
 *
 * @module
 */
import assert from "node:assert/strict";
import type { Socket } from "node:net";
import { trace } from "@opentelemetry/api";
import {
  BasicTracerProvider,
  InMemorySpanExporter,
  SimpleSpanProcessor,
} from "@opentelemetry/sdk-trace-base";
import { TlsRefusals } from "../src/hub/listeners.ts";
import { anonymizeIp } from "../src/observe/anonymize.ts";
import { EXEMPT, exempt, modules, scanSource } from "./fixtures/address_scan.ts";
import { TestPki } from "./fixtures/certs.ts";
import { parseResponses, renderRequest } from "./fixtures/http_client.ts";
import { HubProcess } from "./fixtures/hub.ts";
import { waitFor } from "./fixtures/in_process.ts";
import { SHOP, withProxyEdge } from "./fixtures/proxy_edge.ts";

const ROOT = new URL("../", import.meta.url).pathname;
const SCANNED = ["src", "lanes", "main.ts", "mod.ts"];

/** A loopback source address that is not 127.0.0.1: its last octet must not survive. */
const SOURCE_V4 = "127.0.0.77";

Deno.test("address scan: no module formats a client address without anonymizeIp", async () => {
  const found = [];
  for (const [path, text] of await modules(ROOT, SCANNED)) {
    found.push(...scanSource(path, text).filter((finding) => !exempt(finding)));
  }
  assert.deepEqual(
    found,
    [],
    `format the address with anonymizeIp (src/observe/anonymize.ts):\n${
      found.map((f) => `${f.file}:${f.line} (${f.inside}) ${f.why}: ${f.text}`).join("\n")
    }`,
  );
});

Deno.test("address scan: every exemption still names a function that formats such a value", async () => {
  const texts = new Map(await modules(ROOT, SCANNED));
  for (const exemption of EXEMPT) {
    const text = texts.get(exemption.file);
    assert.ok(text !== undefined, `${exemption.file} is gone: drop its exemption`);
    const hits = scanSource(exemption.file, text).filter((f) => f.inside === exemption.inside);
    assert.ok(hits.length > 0, `${exemption.file} ${exemption.inside}: stale exemption`);
  }
});

/** Planted call sites: each formats a client address itself. */
const PLANTED: Record<string, string> = {
  "a socket's remoteAddress in a log template":
    "function f(socket, log) { log(`refused ${socket.remoteAddress}`); }",
  "a local holding remoteAddress, in a counted detail":
    "function f(socket) { const who = socket.remoteAddress; this.count(`from ${who}`); }",
  "a Deno connection's remoteAddr.hostname concatenated":
    'function f(conn, log) { log("from " + conn.remoteAddr.hostname); }',
  "the peer as a diagnostic field":
    'function f(d, context) { d.warn("slow", { peer: context.peer }); }',
  "the peer shorthand in a span attribute":
    'function f(span, peer) { span.setAttributes({ "client.address": peer }); }',
  "the effective client in an error": "function f(run) { throw new RangeError(run.client()); }",
  "an X-Forwarded-For value in a template":
    'function f(headers, log) { log(`claimed ${headers["x-forwarded-for"]}`); }',
  "an X-Real-IP value through trim and ??":
    'function f(h, log) { const c = h["X-Real-IP"]?.trim() ?? ""; log.info(`c=${c}`); }',
  "the canonical peer in a metric record":
    "function f(m, peer) { m.record({ client: canonicalAddress(peer) }); }",
  "the peer in JSON.stringify": "function f(peer, log) { const s = JSON.stringify({ peer }); }",
  "a conditional that yields the address":
    'function f(peer, log) { log(`from ${peer === "" ? "unix" : peer}`); }',
  "a peer getter's result in a log line":
    "function f(socket, log) { log(`TLS handshake from ${peerOf(socket)} refused`); }",
  "walkChain's result in a GatewayError":
    "function f(v, p, t) { return new GatewayError(walkChain(v, p, t)); }",
};

/** Call sites that look alike and write no address. */
const CLEAN: Record<string, string> = {
  "through the helper":
    "function f(socket, log) { log(`from ${anonymizeIp(socket.remoteAddress)}`); }",
  "a local assigned through the helper":
    "function f(socket, log) { const who = anonymizeIp(socket.remoteAddress); log(`from ${who}`); }",
  "a comparison on the peer":
    'function f(peer, log) { log(`over ${peer === "" ? "unix" : "tcp"}`); }',
  "a lookup by the peer": "function f(peer, set, log) { log(`trusted: ${set.has(peer)}`); }",
  "the address stored, not written": "function f(peer) { return new Record({ peer }); }",
  "a dial target the config names":
    "function f(hub, log) { log(`hub ${hub.url} connected on ${hub.hostname}`); }",
};

for (const [name, text] of Object.entries(PLANTED)) {
  Deno.test(`address scan catches ${name}`, () => {
    const findings = scanSource("planted.ts", text);
    assert.ok(findings.length > 0, `not caught: ${text}`);
  });
}

Deno.test("address scan passes lookalikes that write no address", () => {
  for (const [name, text] of Object.entries(CLEAN)) {
    assert.deepEqual(scanSource("clean.ts", text), [], name);
  }
});

/** One GET sent by python3 from `source` (a loopback address the test process may not bind). */
async function getFrom(source: string, port: number, path: string): Promise<number> {
  const script = [
    "import socket, sys",
    `s = socket.create_connection(("127.0.0.1", ${port}), timeout=5, source_address=("${source}", 0))`,
    `s.sendall(b"GET ${path} HTTP/1.1\\r\\nHost: ${SHOP}\\r\\nConnection: close\\r\\n\\r\\n")`,
    "data = b''",
    "while True:",
    "    chunk = s.recv(65536)",
    "    if not chunk: break",
    "    data += chunk",
    "sys.stdout.write(data.split(b' ')[1].decode())",
  ].join("\n");
  const output = await new Deno.Command("python3", {
    args: ["-c", script],
    stdout: "piped",
    stderr: "piped",
  }).output();
  const text = new TextDecoder().decode(output.stdout);
  assert.ok(output.success, new TextDecoder().decode(output.stderr));
  return Number(text);
}

/** One GET to `[::1]:port`; its status. */
async function getOverV6(port: number, path: string): Promise<number | undefined> {
  const conn = await Deno.connect({ hostname: "::1", port });
  const timer = setTimeout(() => conn.close(), 5000);
  try {
    await conn.write(new TextEncoder().encode(renderRequest({ path, headers: [["Host", SHOP]] })));
    const text = await new Response(conn.readable).text();
    return parseResponses(text, ["GET"])[0]?.status;
  } finally {
    clearTimeout(timer);
  }
}

Deno.test("edge: the access log, the diagnostics and the spans show a client's /24 or /64 only", async () => {
  const exporter = new InMemorySpanExporter();
  const provider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });
  assert.ok(trace.setGlobalTracerProvider(provider), "no other provider was registered");
  const forwarded = ["2001:db8:31:64::dead", "198.51.100.77"];
  try {
    await withProxyEdge({
      socks: [],
      egress: (site) => ({ direct: [new URL(site.backend).host] }),
      policies: {
        blocklist: { rules: [{ name: "admin", path: "^/admin", action: "404" }], block_after: 1 },
        ttl_block: { ttl_ms: 600_000, action: "429" },
      },
      edit(config) {
        config.trusted_proxies = ["127.0.0.1/32"];
        const listen = config.lanes.public.listen;
        listen.push({ hostname: "::1", port: listen[0].port });
      },
    }, async (p) => {
      const port = p.t.ports.public;
      assert.equal(await getFrom(SOURCE_V4, port, "/api/v4"), 200);
      assert.equal(await getOverV6(port, "/api/v6"), 200);
      // Forwarded by the trusted proxy: the policies key on these; the blocklist blocks them.
      for (const client of forwarded) {
        const headers: [string, string][] = [["X-Forwarded-For", client]];
        assert.equal((await p.send({ path: "/admin", headers })).status, 404);
        assert.equal((await p.send({ path: "/api/after", headers })).status, 429, "TTL block");
      }
      await waitFor(() => p.t.accessLines.length, (n) => n >= 6);
      const lines = p.t.accessLines.map((line) => JSON.parse(line));
      assert.deepEqual(
        lines.map((line) => line.client),
        ["127.0.0.0", "::", "127.0.0.0", "127.0.0.0", "127.0.0.0", "127.0.0.0"],
      );
      assert.ok(p.t.lines.some((line) => line.includes("policy")), p.t.lines.join("\n"));
      const spans = exporter.getFinishedSpans();
      assert.ok(spans.length >= 6, `${spans.length} spans`);
      const records: [string, string][] = [
        ["the access log", p.t.accessLines.join("\n")],
        // Less the boot's "listening on [::1]:…": the edge's own address, which its config names.
        ["the diagnostics", p.t.lines.filter((l) => !l.includes("listening on")).join("\n")],
        ["the spans", JSON.stringify(spans.map((s) => ({ n: s.name, a: s.attributes })))],
      ];
      for (const [where, text] of records) {
        for (const whole of [SOURCE_V4, "::1", ...forwarded]) {
          assert.ok(!text.includes(whole), `${where} carries ${whole}:\n${text}`);
        }
      }
    });
  } finally {
    trace.disable();
    await provider.shutdown();
  }
});

Deno.test("hub: a refused TLS handshake is logged with the client's /24, not its address", async () => {
  const pki = await TestPki.create();
  const hub = await HubProcess.start({ pki });
  try {
    // Plain HTTP to the TLS listener, from a loopback address other than 127.0.0.1.
    await getFrom(SOURCE_V4, hub.apiPort, "/v1/config").catch(() => 0);
    await waitFor(() => hub.stderr, (text) => text.includes("TLS handshake from"));
    const line = hub.stderr.split("\n").find((l) => l.includes("TLS handshake from"))!;
    assert.match(line, /TLS handshake from 127\.0\.0\.0 refused/);
    assert.ok(!hub.stderr.includes(SOURCE_V4), hub.stderr);
  } finally {
    await hub.dispose();
    await Deno.remove(pki.dir, { recursive: true }).catch(() => {});
  }
});

Deno.test("hub: refusal lines anonymise IPv6 and IPv4-mapped peers, and say '-' for a gone one", () => {
  const cases: [string | undefined, string][] = [
    ["2001:db8:aa:bb:cc:dd:ee:ff", "2001:db8:aa:bb::"],
    ["::ffff:203.0.113.9", "203.0.113.0"],
    [undefined, "-"],
  ];
  for (const [address, shown] of cases) {
    const lines: string[] = [];
    new TlsRefusals((line) => lines.push(line)).note(
      new Error("wrong version number"),
      { remoteAddress: address } as Socket,
    );
    assert.equal(lines.length, 1);
    assert.ok(lines[0].includes(`TLS handshake from ${shown} refused`), lines[0]);
    if (address) assert.ok(!lines[0].includes(address), lines[0]);
    assert.equal(anonymizeIp(address), shown);
  }
});
