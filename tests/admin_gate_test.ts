/**
 * The admin gate (src/pipeline/admin_gate.ts), as an attacker and an operator meet it: which
 * spellings of the secret path are hits (only the exact bytes, with or without the final slash,
 * with or without a query), what a hit answers (501, `no-store`, the connection closed), that a miss
 * goes on exactly as before (421, 404, a tenant's page), that a hit is admitted like any request
 * (and refused like any when the lane is out of budget), and that no access-log line, metric series
 * or span ever shows a hit while a miss shows in all three. Booting refuses a gate file that is
 * open to others or malformed, and no message prints a segment.
 *
 * @module
 */
import assert from "node:assert/strict";
import { createHmac, randomBytes } from "node:crypto";
import { trace } from "@opentelemetry/api";
import {
  BasicTracerProvider,
  InMemorySpanExporter,
  SimpleSpanProcessor,
} from "@opentelemetry/sdk-trace-base";
import { requiredGrants } from "../src/boot/flags.ts";
import { summarizePlan } from "../src/cli/summary.ts";
import { loadConfig } from "../src/config/load.ts";
import { planEdge } from "../src/edge/plan.ts";
import {
  ADMIN_GATE_FIELD,
  AdminGate,
  firstSegments,
  hmacSha256,
  loadAdminGate,
} from "../src/pipeline/admin_gate.ts";
import { LANES } from "../lanes/mod.ts";
import { exchange, parseResponses, type RawResponse, request } from "./fixtures/http_client.ts";
import {
  balancedLedger,
  bootEdge,
  type ConfigObject,
  envelope,
  type TestEdge,
  waitFor,
  withEdge,
} from "./fixtures/in_process.ts";
import { derivedFlags, freePorts, MAIN, proofConfig, writeConfig } from "./fixtures/gateway.ts";
import { messages } from "./fixtures/diag_lines.ts";

const SLUG = "slug-0123456789abcdef";
const T1 = "t1_ABCDEFGHIJKLMNOPq";
const T2 = "t2-qrstuvwxyz0123456";
const SECRET = `/${SLUG}/${T1}/${T2}/`;
const SEGMENTS = [SLUG, T1, T2];

/** `text` names none of the three segments (nor a recognisable part of one). */
function namesNoSegment(text: string): boolean {
  return SEGMENTS.every((segment) => !text.includes(segment.slice(0, 12)));
}

/** Changes the last character of a segment: same length, one byte different. */
function flip(segment: string): string {
  const last = segment.at(-1)!;
  return segment.slice(0, -1) + (last === "x" ? "y" : "x");
}

// ---- The matcher, as a pure function.

Deno.test("AdminGate.matches() hits the exact segments, with or without the final slash, a tail or a query", () => {
  const gate = AdminGate.fromLine(`${SECRET}\n`);
  for (
    const target of [
      SECRET,
      SECRET.slice(0, -1), // no final slash: all three named, so a hit (documented)
      `${SECRET}status`,
      `${SECRET}deep/er/path`,
      `${SECRET}?x=1`,
      `${SECRET.slice(0, -1)}?x=1`,
      `${SECRET}?a=/b/c/d`,
    ]
  ) assert.equal(gate.matches(target), true, target);
});

Deno.test("AdminGate.matches() misses every other spelling: one segment wrong, case, escapes, slashes, forms", () => {
  const gate = AdminGate.fromLine(SECRET);
  const misses: [string, string][] = [
    ["segment 1 wrong", `/${flip(SLUG)}/${T1}/${T2}/`],
    ["segment 2 wrong", `/${SLUG}/${flip(T1)}/${T2}/`],
    ["segment 3 wrong", `/${SLUG}/${T1}/${flip(T2)}/`],
    ["segment 3 longer", `/${SLUG}/${T1}/${T2}x/`],
    ["segment 3 shorter", `/${SLUG}/${T1}/${T2.slice(0, -1)}/`],
    ["segments swapped", `/${T1}/${SLUG}/${T2}/`],
    ["two segments", `/${SLUG}/${T1}/`],
    ["upper case", SECRET.toUpperCase()],
    ["first letter upper case", `/S${SLUG.slice(1)}/${T1}/${T2}/`],
    ["percent-encoded letter", `/%73${SLUG.slice(1)}/${T1}/${T2}/`],
    ["percent-encoded slash", `/${SLUG}%2F${T1}/${T2}/`],
    ["extra leading slash", `/${SECRET}`],
    ["doubled inner slash", `/${SLUG}//${T1}/${T2}/`],
    ["dot segment", `/./${SLUG}/${T1}/${T2}/`],
    ["dot-dot segment", `/x/../${SLUG}/${T1}/${T2}/`],
    ["absolute form", `http://demo.test${SECRET}`],
    ["absolute form, no scheme", `//demo.test${SECRET}`],
    ["query before the segments", `/?${SLUG}/${T1}/${T2}/`],
    ["asterisk", "*"],
    ["empty", ""],
    ["root", "/"],
  ];
  for (const [why, target] of misses) assert.equal(gate.matches(target), false, why);
});

Deno.test("firstSegments() takes three segments of the path before the query, empty when missing", () => {
  assert.deepEqual(firstSegments("/a/b/c/d?q"), ["a", "b", "c"]);
  assert.deepEqual(firstSegments("/a/b/c?x/y/z"), ["a", "b", "c"]);
  assert.deepEqual(firstSegments("/a"), ["a", "", ""]);
  assert.deepEqual(firstSegments("/a/?b/c"), ["a", "", ""]);
  assert.deepEqual(firstSegments("//a/b"), ["", "a", "b"]);
  assert.deepEqual(firstSegments(""), ["", "", ""]);
  assert.deepEqual(firstSegments("*"), ["", "", ""]);
});

Deno.test("hmacSha256() is HMAC-SHA-256 (RFC 2104), equal to node's createHmac for the same key", () => {
  for (let i = 0; i < 20; i++) {
    const key = new Uint8Array(randomBytes(64));
    const digest = hmacSha256(key);
    for (const message of ["", SLUG, "ü/%2F?", "x".repeat(300)]) {
      const expected = createHmac("sha256", key).update(message).digest();
      assert.deepEqual(Buffer.from(digest(message)), expected);
    }
  }
  assert.throws(() => hmacSha256(new Uint8Array(32)), RangeError);
});

Deno.test("AdminGate.fromLine() refuses a malformed line, naming the segment and never its value", () => {
  const cases: [string, RegExp][] = [
    [`/${SLUG}/short/${T2}/`, /^Segment 2 \(t1\) is 5 characters long, not 16 to 128$/],
    [`/${SLUG}/${T1}/${T2}.x/`, /^Segment 3 \(t2\) holds a character outside A-Z a-z 0-9 _ -$/],
    [`/${"s".repeat(129)}/${T1}/${T2}/`, /^Segment 1 \(slug\) is 129 characters long/],
    [`/${SLUG}/${T1}/`, /^Its line has 2 segments, not 3$/],
    [`/${SLUG}/${T1}/${T2}/more/`, /^Its line has 4 segments, not 3$/],
    [`/${SLUG}/${T1}/${T2}`, /^Its line does not start and end with \/$/],
    [` ${SECRET}`, /^Its line does not start and end with \/$/],
    [`${SECRET}\n${SECRET}\n`, /^It holds more than one line$/],
    // A break inside the line, not at its end: never joined into a valid line.
    [`/${SLUG}\n/${T1}/${T2}/`, /^It holds more than one line$/],
    // A lone carriage return ends a line as well as a line feed does.
    [`${SECRET}\r`, /^It holds more than one line$/],
    [`/${SLUG}/${T1}\r/${T2}/`, /^It holds more than one line$/],
    ["", /^Its line does not start and end with \/$/],
  ];
  for (const [line, message] of cases) {
    assert.throws(() => AdminGate.fromLine(line), (error: Error) => {
      assert.ok(error instanceof TypeError);
      assert.match(error.message, message);
      assert.ok(namesNoSegment(error.message), error.message);
      return true;
    });
  }
  assert.equal(AdminGate.fromLine(`${SECRET}\r\n`).matches(SECRET), true, "a CRLF line is fine");
});

// ---- The file, read at boot as a secret.

/** Writes the gate file (mode `mode`) in a fresh folder. */
async function gateFile(line = `${SECRET}\n`, mode = 0o600): Promise<string> {
  const dir = await Deno.makeTempDir({ prefix: "portcullis-gate-" });
  const file = `${dir}/admin.gate`;
  await Deno.writeTextFile(file, line, { mode });
  await Deno.chmod(file, mode);
  return file;
}

Deno.test("loadAdminGate() refuses a file group or others may read, naming the field and the file", async () => {
  const file = await gateFile(`${SECRET}\n`, 0o640);
  try {
    await assert.rejects(loadAdminGate(file), (error: Error) => {
      assert.ok(error.message.startsWith(`${ADMIN_GATE_FIELD} ${file} `), error.message);
      assert.match(error.message, /0640/);
      assert.ok(namesNoSegment(error.message), error.message);
      return true;
    });
    await Deno.chmod(file, 0o600);
    assert.equal((await loadAdminGate(file)).matches(SECRET), true);
  } finally {
    await Deno.remove(file.slice(0, file.lastIndexOf("/")), { recursive: true });
  }
});

Deno.test("loadAdminGate() names the field, the file and the malformed segment, never a segment's value", async () => {
  const file = await gateFile(`/${SLUG}/${T1}/${T2.slice(0, 10)}/\n`);
  try {
    await assert.rejects(loadAdminGate(file), (error: Error) => {
      assert.equal(
        error.message,
        `${ADMIN_GATE_FIELD} ${file} must hold one line /<slug>/<t1>/<t2>/ (each segment 16 to ` +
          "128 of A-Z a-z 0-9 _ -): segment 3 (t2) is 10 characters long, not 16 to 128",
      );
      assert.ok(namesNoSegment(error.message) && !error.message.includes(T2.slice(0, 10)));
      return true;
    });
    await assert.rejects(loadAdminGate(`${file}.missing`), /admin_gate\.file .* does not exist/);
  } finally {
    await Deno.remove(file.slice(0, file.lastIndexOf("/")), { recursive: true });
  }
});

// ---- On a real edge.

/** Config edit: the public lane's admin gate reads `file`. */
function withGate(file: string): (config: ConfigObject) => void {
  return (config) => config.lanes.public.admin_gate = { file };
}

/** Sends `target` to the public lane with `Host: host` (and more headers) on a new connection. */
async function send(
  t: TestEdge,
  target: string,
  options: { host?: string; headers?: [string, string][]; method?: string } = {},
): Promise<RawResponse> {
  const given = options.headers ?? [];
  const close = given.some(([name]) => name === "Connection") ? [] : [["Connection", "close"]];
  const headers = [["Host", options.host ?? "demo.test"], ...given, ...close]
    .map(([name, value]) => `${name}: ${value}\r\n`).join("");
  const method = options.method ?? "GET";
  const text = await exchange(t.ports.public, `${method} ${target} HTTP/1.1\r\n${headers}\r\n`);
  const [response] = parseResponses(text, [method]);
  assert.ok(response, `no response to ${target}`);
  return response;
}

Deno.test("admin gate on the edge: a hit is 501 no-store and closes; misses go on as before", async () => {
  const file = await gateFile();
  try {
    await withEdge({ edit: withGate(file) }, async (t) => {
      for (const target of [SECRET, SECRET.slice(0, -1), `${SECRET}x?y=1`]) {
        for (const host of ["demo.test", "unknown.test"]) {
          const hit = await send(t, target, { host, headers: [["X-Request-Id", "gate-1"]] });
          assert.equal(hit.status, 501, `${target} on ${host}: ${hit.body}`);
          assert.deepEqual(envelope(hit), {
            code: "admin_not_implemented",
            message: "This is not implemented yet",
            request_id: "gate-1",
          });
          assert.equal(hit.headers["cache-control"], "no-store");
          assert.equal(hit.headers["connection"], "close");
          assert.ok(namesNoSegment(JSON.stringify(hit)), "the answer names no segment");
        }
      }
      // The gate reads no body and checks no framing: even a keep-alive connection is closed.
      const started = performance.now();
      const kept = await send(t, SECRET, { headers: [["Connection", "keep-alive"]] });
      assert.equal(kept.status, 501);
      assert.equal(kept.headers["connection"], "close");
      assert.ok(performance.now() - started < 5000, "the edge closed the connection");
      // A hit on an Upgrade request is answered the same way on its socket.
      const upgrade = await send(t, SECRET, {
        headers: [["Connection", "Upgrade"], ["Upgrade", "websocket"]],
      });
      assert.equal(upgrade.status, 501);

      // Each single segment wrong: the tenant lookup answers as it always did.
      const wrong = [
        `/${flip(SLUG)}/${T1}/${T2}/`,
        `/${SLUG}/${flip(T1)}/${T2}/`,
        `/${SLUG}/${T1}/${flip(T2)}/`,
      ];
      for (const target of wrong) {
        assert.equal((await send(t, target)).status, 404, target);
        assert.equal(envelope(await send(t, target)).code, "no_route");
        assert.equal(
          envelope(await send(t, target, { host: "unknown.test" })).code,
          "misdirected_request",
        );
      }
      // Other spellings are ordinary requests too (documented: only the exact bytes are a hit).
      const spellings = [
        SECRET.toUpperCase(),
        `/%73${SLUG.slice(1)}/${T1}/${T2}/`,
        `/${SECRET}`,
        `/${SLUG}//${T1}/${T2}/`,
        `http://demo.test${SECRET}`,
      ];
      for (const target of spellings) {
        const response = await send(t, target);
        assert.equal(response.status, 404, `${target}: ${response.body}`);
      }
      // An absolute-form target for the root of demo.test is still the tenant's page.
      assert.equal((await send(t, "http://demo.test/")).body, "tenant-home");
      assert.equal((await send(t, "/")).body, "tenant-home");

      // The protected lanes never match.
      for (const port of [t.ports.local_health, t.ports.provider_health]) {
        const response = await request(port, { path: SECRET });
        assert.equal(envelope(response).code, "route_not_allowed");
      }
      await balancedLedger(t);
    });
  } finally {
    await Deno.remove(file.slice(0, file.lastIndexOf("/")), { recursive: true });
  }
});

/** The metrics page's lines about the public lane, by series, once its connections closed. */
function publicSeries(t: TestEdge): Promise<Map<string, string>> {
  const settled = (series: Map<string, string>) =>
    series.get('portcullis_lane_connections{lane="public"}') === "0" &&
    series.get('portcullis_ledger_in_use{lane="public"}') === "0";
  return waitFor(() => readPublicSeries(t), settled);
}

async function readPublicSeries(t: TestEdge): Promise<Map<string, string>> {
  const page = (await request(t.ports.local_health, { path: "/metrics" })).body;
  assert.ok(namesNoSegment(page), "the metrics page names a segment");
  const series = new Map<string, string>();
  for (const line of page.split("\n")) {
    if (line.startsWith("#") || !line.includes('lane="public"')) continue;
    const space = line.lastIndexOf(" ");
    series.set(line.slice(0, space), line.slice(space + 1));
  }
  return series;
}

/** The series whose value differs between two readings. */
function moved(before: Map<string, string>, after: Map<string, string>): string[] {
  const names = new Set([...before.keys(), ...after.keys()]);
  return [...names].filter((name) => before.get(name) !== after.get(name)).sort();
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

Deno.test("admin gate on the edge: a hit is in no access-log line, metric series or span; a miss is in all three", async () => {
  const file = await gateFile();
  try {
    await withSpans(async (exporter) => {
      // The log keeps everything (sample 1): any record the hit got would be written. With a
      // salt, series carry tenant and route labels.
      const salt = `${file}.salt`;
      await Deno.writeTextFile(salt, "admin-gate-test-salt-0123456789\n", { mode: 0o600 });
      await Deno.chmod(salt, 0o600);
      const edit = (config: ConfigObject) => {
        withGate(file)(config);
        config.observe = { salt_file: salt, access_log: { enabled: true, sample: 1 } };
      };
      await withEdge({ edit }, async (t) => {
        const publicSpans = () =>
          exporter.getFinishedSpans().filter((s) => s.attributes["portcullis.lane"] === "public");
        // A miss first, so every instrument has seen the public lane once.
        assert.equal((await send(t, "/")).status, 200);
        await waitFor(() => t.accessLines.length, (n) => n === 1);
        const spansBefore = publicSpans().length;
        assert.ok(spansBefore >= 1, "the miss was traced");
        const before = await publicSeries(t);

        for (const target of [SECRET, SECRET.slice(0, -1), `${SECRET}?q=1`]) {
          for (const host of ["demo.test", "unknown.test"]) {
            assert.equal((await send(t, target, { host })).status, 501);
          }
        }
        await balancedLedger(t);
        const after = await publicSeries(t);

        assert.equal(t.accessLines.length, 1, `a hit was logged:\n${t.accessLines.join("\n")}`);
        assert.equal(publicSpans().length, spansBefore, "a hit was traced");
        // Only the ledger's lane-wide admission count may move (the hits were admitted).
        assert.deepEqual(moved(before, after), ['portcullis_ledger_admitted_total{lane="public"}']);
        assert.equal(
          Number(after.get('portcullis_ledger_admitted_total{lane="public"}')) -
            Number(before.get('portcullis_ledger_admitted_total{lane="public"}')),
          6,
        );

        // A miss after them shows everywhere (so this test can fail).
        assert.equal((await send(t, `/${SLUG}/${T1}/${flip(T2)}/`)).status, 404);
        await waitFor(() => t.accessLines.length, (n) => n === 2);
        const line = JSON.parse(t.accessLines[1]);
        assert.equal(line.status, 404);
        assert.equal(line.outcome, "no_route");
        await waitFor(() => publicSpans().length, (n) => n === spansBefore + 1);
        const missed = moved(after, await publicSeries(t));
        assert.ok(
          missed.some((name) => /^portcullis_requests_total\{.*route="-"/.test(name)),
          missed.join("\n"),
        );
        assert.ok(missed.some((name) => name.startsWith("portcullis_request_duration_seconds_")));

        const everything = JSON.stringify(exporter.getFinishedSpans().map((s) => s.attributes)) +
          t.accessLines.join("\n");
        // The miss's span carries its own path (segment 3 flipped), so look for the exact ones.
        assert.ok(!everything.includes(SECRET.slice(0, -1)), "a span or line names the gate");
      });
    });
  } finally {
    await Deno.remove(file.slice(0, file.lastIndexOf("/")), { recursive: true });
  }
});

Deno.test("admin gate on the edge: the public lane's ACME companion answers a hit too, unobserved", async () => {
  const file = await gateFile();
  const [acmePort] = freePorts(1);
  try {
    const edit = (config: ConfigObject) => {
      withGate(file)(config);
      config.lanes.public.acme_http = { hostname: "127.0.0.1", port: acmePort, challenge_dir: "." };
    };
    await withEdge({ edit }, async (t) => {
      const hit = await request(acmePort, { path: SECRET });
      assert.equal(envelope(hit).code, "admin_not_implemented");
      const miss = await request(acmePort, { path: `/${SLUG}/${T1}/${flip(T2)}/` });
      assert.equal(envelope(miss).code, "route_not_allowed");
      await waitFor(() => t.accessLines.length, (n) => n >= 1);
      await new Promise((resolve) => setTimeout(resolve, 100));
      assert.deepEqual(t.accessLines.map((line) => JSON.parse(line).status), [404]);
    });
  } finally {
    await Deno.remove(file.slice(0, file.lastIndexOf("/")), { recursive: true });
  }
});

Deno.test("admin gate on the edge: a hit spends the lane's admission like any request, and is refused like any", async () => {
  const file = await gateFile();
  try {
    const edit = (config: ConfigObject) => {
      withGate(file)(config);
      config.ledger.lanes.public.rate = { per_second: 0.001, burst: 2 };
      config.observe = { access_log: { enabled: true, sample: 1 } };
    };
    await withEdge({ edit }, async (t) => {
      assert.equal((await send(t, SECRET)).status, 501, "the first token");
      assert.equal((await send(t, "/")).status, 200, "the second token");
      const refused = await send(t, SECRET);
      assert.equal(refused.status, 429, "the gate is no way around the rate budget");
      assert.equal(envelope(refused).code, "rate_budget");
      assert.equal(envelope(await send(t, "/")).code, "rate_budget");
      const ledger = await balancedLedger(t);
      assert.equal(ledger.lanes.public.admitted, 2);
      assert.equal(ledger.lanes.public.overload.rate_budget, 2);
      assert.equal(t.accessLines.length, 2, "the refused miss is logged; no hit is");
    });
  } finally {
    await Deno.remove(file.slice(0, file.lastIndexOf("/")), { recursive: true });
  }
});

Deno.test("admin gate on the edge: boot is refused for a gate file open to others, naming no segment", async () => {
  const file = await gateFile(`${SECRET}\n`, 0o644);
  try {
    await assert.rejects(bootEdge({ edit: withGate(file) }), (error: Error) => {
      assert.match(error.message, new RegExp(`${ADMIN_GATE_FIELD} ${file} .*0644`));
      assert.ok(namesNoSegment(error.message), error.message);
      return true;
    });
  } finally {
    await Deno.remove(file.slice(0, file.lastIndexOf("/")), { recursive: true });
  }
});

Deno.test("admin gate config: the edge is granted read on the file, and check says it is on without the path", async () => {
  const file = await gateFile();
  const dir = await writeConfig(
    proofConfig({ public: 8080, local_health: 0, provider_health: 0 }, {
      lanes: { public: { listen: [{ hostname: "127.0.0.1", port: 8080 }], admin_gate: { file } } },
    }),
  );
  try {
    const config = await loadConfig(dir.config);
    assert.deepEqual(config.adminGate, { file });
    const grants = requiredGrants(config).filter((g) => g.value === file);
    assert.deepEqual(grants, [{ name: "read", value: file, purpose: "admin gate" }]);
    const summary = summarizePlan(await planEdge(config, LANES));
    const line = summary.split("\n").find((l) => l.includes("admin gate"));
    assert.equal(line, "    admin gate: on", "the summary's line names no path");
    assert.ok(namesNoSegment(summary));
  } finally {
    await Deno.remove(dir.dir, { recursive: true });
    await Deno.remove(file.slice(0, file.lastIndexOf("/")), { recursive: true });
  }
});

Deno.test("admin gate on the real binary, under its derived flags: a hit never reaches stdout's access log, a miss does", async () => {
  const file = await gateFile();
  const [publicPort, localPort] = freePorts(2);
  const ports = { public: publicPort, local_health: localPort, provider_health: 0 };
  const config = proofConfig(ports);
  (config.lanes as ConfigObject).public.admin_gate = { file };
  const dir = await writeConfig(config);
  const flags = await derivedFlags(dir.config);
  assert.ok(flags.some((f) => f.startsWith("--allow-read=") && f.includes(file)), flags.join(" "));
  // With local_health beside it, the public lane runs in a request worker that reads the gate.
  const child = new Deno.Command(Deno.execPath(), {
    args: ["run", "--no-prompt", ...flags, MAIN, "serve", dir.config],
    stdout: "piped",
    stderr: "piped",
    stdin: "null",
    env: { NO_COLOR: "1" },
  }).spawn();
  const stdout = new Response(child.stdout).text();
  const stderrText = new Response(child.stderr).text();
  try {
    await waitFor(
      () => request(publicPort, { path: "/", headers: [["Host", "demo.test"]] }).catch(() => null),
      (response) => response?.status === 200,
      20_000,
    );
    const hit = await request(publicPort, { path: SECRET, headers: [["Host", "demo.test"]] });
    assert.equal(hit.status, 501, hit.body);
    const miss = await request(publicPort, { path: `/${flip(SLUG)}/${T1}/${T2}/` });
    assert.equal(miss.status, 421);
    await new Promise((resolve) => setTimeout(resolve, 300)); // the log's 50 ms batches
  } finally {
    child.kill("SIGTERM");
    await child.status;
    await Deno.remove(dir.dir, { recursive: true });
    await Deno.remove(file.slice(0, file.lastIndexOf("/")), { recursive: true });
  }
  const lines = (await stdout).trim().split("\n").map((line) => JSON.parse(line));
  // The readiness polls (200, or a 503 before the edge was ready), the miss; never the hit.
  const statuses = lines.map((l) => l.status);
  assert.equal(statuses.at(-1), 421, JSON.stringify(lines));
  assert.ok(statuses.slice(0, -1).every((status) => status === 200 || status === 503));
  assert.ok(!statuses.includes(501), "the hit was logged");
  const stderr = await stderrText;
  assert.match(messages(stderr), /^ready: node /m);
  assert.ok(namesNoSegment(`${await stdout}\n${stderr}`));
});
