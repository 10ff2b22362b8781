/**
 * Unit tests for the observation helpers: `anonymizeIp`, `TenantLabels`, `AccessLog`, `shouldLog`,
 * the access log's user agent and protocol fields, and the diagnostic log (`diagnostics`).
 *
 * @module
 */
import assert from "node:assert/strict";
import { anonymizeIp } from "../src/observe/anonymize.ts";
import { LABEL_CACHE_LIMIT, TenantLabels, UNLABELLED } from "../src/observe/tenant_label.ts";
import {
  type AccessEntry,
  AccessLog,
  protocolField,
  shouldLog,
  USER_AGENT_CHARS,
  userAgentField,
} from "../src/observe/access_log.ts";
import { diagnostics, diagnosticSink, formatLine, readLine } from "../src/observe/diag.ts";

const SALT_A = new TextEncoder().encode("salt-a-0123456789abcdef");
const SALT_B = new TextEncoder().encode("salt-b-0123456789abcdef");

/** Whether this run may create temp files (`deno task test` may; a read-only run skips those). */
const WRITABLE = Deno.permissions.querySync({ name: "write" }).state === "granted";

/** An ordinary successful public request unless told. */
function entry(overrides: Partial<AccessEntry> = {}): AccessEntry {
  return {
    time: "2025-01-01T00:00:00.000Z",
    request_id: "req-1",
    lane: "public",
    tenant: "0123456789abcdef",
    route: "api",
    method: "GET",
    path: "/v1/items",
    protocol: "HTTP/1.1",
    status: 200,
    bytes_in: 10,
    bytes_out: 20,
    duration_ms: 5,
    client: "203.0.113.0",
    ...overrides,
  };
}

/** An access log collecting its lines. */
function collecting(sample: number, random?: () => number): { log: AccessLog; lines: string[] } {
  const lines: string[] = [];
  const log = new AccessLog({ enabled: true, sample, write: (line) => lines.push(line), random });
  return { log, lines };
}

/** A temp salt file holding `text`. */
async function saltFile(text: string): Promise<string> {
  const path = await Deno.makeTempFile({ prefix: "portcullis-salt-" });
  await Deno.writeTextFile(path, text);
  return path;
}

Deno.test("anonymizeIp() keeps the IPv4 /24 and the IPv6 /64 and hides the rest", () => {
  const table: [string, string][] = [
    ["203.0.113.77", "203.0.113.0"],
    ["0.0.0.0", "0.0.0.0"],
    ["255.255.255.255", "255.255.255.0"],
    ["2001:db8:1:2:3:4:5:6", "2001:db8:1:2::"],
    ["2001:0DB8:0001:0002:0003:0004:0005:0006", "2001:db8:1:2::"],
    ["2001:db8::1", "2001:db8::"],
    ["2001:db8:0:0:1::", "2001:db8::"],
    ["2001:db8:a:b::ff", "2001:db8:a:b::"],
    ["::1", "::"],
    ["::", "::"],
    ["[2001:db8:1:2::9]", "2001:db8:1:2::"],
    ["::ffff:203.0.113.77", "203.0.113.0"],
    ["::FFFF:cb00:714d", "203.0.113.0"],
    ["fe80::1%eth0", "fe80::"],
    ["fe80::1:2:3:4%25", "fe80::"],
  ];
  for (const [address, expected] of table) {
    assert.equal(anonymizeIp(address), expected, address);
  }
});

Deno.test("anonymizeIp() writes '-' for anything that is not an address, never the input", () => {
  const garbage = [
    "",
    "-",
    "unknown",
    "203.0.113",
    "203.0.113.256",
    "010.0.0.1",
    "203.0.113.77:443",
    "[203.0.113.77]",
    "2001:db8::1::2",
    "fe80::1%",
    "1:2:3:4:5:6:7:8:9",
    "<script>",
    "203.0.113.77\n",
  ];
  for (const address of garbage) assert.equal(anonymizeIp(address), "-", JSON.stringify(address));
});

Deno.test("TenantLabels.label() is 16 hex digits, deterministic, and case-insensitive", () => {
  const labels = new TenantLabels(SALT_A);
  const label = labels.label("demo.example");
  assert.match(label, /^[0-9a-f]{16}$/);
  assert.equal(new TenantLabels(SALT_A).label("demo.example"), label);
  assert.equal(labels.label("Demo.EXAMPLE"), label);
  assert.notEqual(labels.label("other.example"), label);
  assert.notEqual(label, "demo.example");
});

Deno.test("TenantLabels.label() is SHA-256 of the lower-cased host then the salt", async () => {
  const input = new Uint8Array([...new TextEncoder().encode("demo.example"), ...SALT_A]);
  const digest = new Uint8Array(await crypto.subtle.digest("SHA-256", input));
  const hex = Array.from(digest, (byte) => byte.toString(16).padStart(2, "0")).join("");
  assert.equal(new TenantLabels(SALT_A).label("DEMO.example"), hex.slice(0, 16));
});

Deno.test("TenantLabels.label() differs by salt and ignores later changes to the salt array", () => {
  const salt = SALT_A.slice();
  const labels = new TenantLabels(salt);
  const before = labels.label("demo.example");
  assert.notEqual(new TenantLabels(SALT_B).label("demo.example"), before);
  salt.fill(0);
  assert.equal(new TenantLabels(SALT_A).label("fresh.example"), labels.label("fresh.example"));
});

Deno.test("TenantLabels bounds its memo table by clearing it when full", () => {
  const labels = new TenantLabels(SALT_A);
  for (let index = 0; index < LABEL_CACHE_LIMIT; index++) labels.label(`t${index}.example`);
  assert.equal(labels.cached, LABEL_CACHE_LIMIT);
  const label = labels.label("one-more.example");
  assert.equal(labels.cached, 1);
  assert.equal(labels.label("t0.example"), new TenantLabels(SALT_A).label("t0.example"));
  assert.equal(labels.label("one-more.example"), label);
});

Deno.test("TenantLabels refuses a salt shorter than 16 bytes", () => {
  assert.throws(() => new TenantLabels(new Uint8Array(15)), RangeError);
  assert.match(new TenantLabels(new Uint8Array(16)).label("a"), /^[0-9a-f]{16}$/);
});

Deno.test("TenantLabels.fromSaltBytes() trims trailing whitespace only", () => {
  const bytes = new TextEncoder().encode("salt-a-0123456789abcdef \n\r\n");
  const result = TenantLabels.fromSaltBytes(bytes, "/etc/salt");
  assert.equal(result.problem, undefined);
  assert.equal(
    result.labels?.label("demo.example"),
    new TenantLabels(SALT_A).label("demo.example"),
  );
  const leading = TenantLabels.fromSaltBytes(
    new TextEncoder().encode(" salt-a-0123456789abcdef"),
    "s",
  );
  assert.notEqual(leading.labels?.label("demo.example"), result.labels?.label("demo.example"));
});

Deno.test("TenantLabels.fromSaltBytes() names the file for an empty or short salt", () => {
  const cases: [string, string][] = [
    ["", 'Tenant label salt "/etc/salt" is empty'],
    [" \n\t\r\n", 'Tenant label salt "/etc/salt" is empty'],
    ["0123456789abcde\n", 'Tenant label salt "/etc/salt" is 15 bytes; at least 16 are required'],
  ];
  for (const [text, problem] of cases) {
    const result = TenantLabels.fromSaltBytes(new TextEncoder().encode(text), "/etc/salt");
    assert.deepEqual(result, { problem }, JSON.stringify(text));
  }
  assert.ok(TenantLabels.fromSaltBytes(new TextEncoder().encode("0123456789abcdef"), "s").labels);
});

Deno.test("TenantLabels.fromFile() names a missing file and an empty one", async () => {
  const missing = await TenantLabels.fromFile("/nonexistent/portcullis/salt");
  assert.equal(missing.labels, undefined);
  assert.match(
    missing.problem ?? "",
    /^Cannot read tenant label salt "\/nonexistent\/portcullis\/salt": /,
  );
  if (Deno.build.os !== "windows") {
    // A salt must be a regular file (rooted_read.ts): a device is refused before it is read.
    assert.deepEqual(await TenantLabels.fromFile("/dev/null"), {
      problem: 'Cannot read tenant label salt "/dev/null": is not a regular file',
    });
  }
});

Deno.test({
  name: "TenantLabels.fromFile() reads a temp salt file with trailing whitespace trimmed",
  ignore: !WRITABLE,
}, async () => {
  const path = await saltFile("salt-a-0123456789abcdef \n\r\n");
  try {
    const result = await TenantLabels.fromFile(path);
    assert.equal(result.problem, undefined);
    assert.equal(
      result.labels?.label("demo.example"),
      new TenantLabels(SALT_A).label("demo.example"),
    );
  } finally {
    await Deno.remove(path);
  }
});

Deno.test({
  name: "TenantLabels.fromFile() names the temp file for a missing, empty or short salt",
  ignore: !WRITABLE,
}, async () => {
  const dir = await Deno.makeTempDir({ prefix: "portcullis-salt-" });
  const empty = await saltFile(" \n\t\n");
  const short = await saltFile("too-short-salt\n");
  try {
    const cases: [string, RegExp][] = [
      [`${dir}/missing`, /^Cannot read tenant label salt ".*missing"/],
      [empty, /is empty$/],
      [short, /is 14 bytes; at least 16 are required$/],
    ];
    for (const [path, reason] of cases) {
      const result = await TenantLabels.fromFile(path);
      assert.equal(result.labels, undefined, path);
      assert.ok(result.problem?.includes(`"${path}"`), result.problem);
      assert.match(result.problem ?? "", reason);
    }
  } finally {
    await Deno.remove(dir);
    await Deno.remove(empty);
    await Deno.remove(short);
  }
});

Deno.test("UNLABELLED is the '-' placeholder", () => {
  assert.equal(UNLABELLED, "-");
});

Deno.test("AccessLog.log() writes one JSON line with keys in interface order", () => {
  const { log, lines } = collecting(1);
  log.log(entry({
    outcome: "upstream_timeout",
    retries: 1,
    attempts: 2,
    upstream_ms: 4,
    user_agent: "curl/8.5.0",
  }));
  log.log(entry({ client: "2001:db8::" }));
  assert.equal(lines.length, 2);
  assert.ok(lines.every((line) => !line.includes("\n")));
  assert.deepEqual(Object.keys(JSON.parse(lines[0])), [
    "time",
    "request_id",
    "lane",
    "tenant",
    "route",
    "method",
    "path",
    "protocol",
    "status",
    "bytes_in",
    "bytes_out",
    "duration_ms",
    "upstream_ms",
    "attempts",
    "retries",
    "outcome",
    "client",
    "user_agent",
  ]);
  assert.equal(
    lines[1],
    '{"time":"2025-01-01T00:00:00.000Z","request_id":"req-1","lane":"public",' +
      '"tenant":"0123456789abcdef","route":"api","method":"GET","path":"/v1/items",' +
      '"protocol":"HTTP/1.1","status":200,"bytes_in":10,"bytes_out":20,"duration_ms":5,' +
      '"client":"2001:db8::"}',
  );
  assert.equal(log.written, 2);
});

Deno.test("AccessLog.log() at sample 0 writes only errors, withheld and outcomes", () => {
  const { log, lines } = collecting(0, () => 0);
  log.log(entry({ status: 200 }));
  log.log(entry({ status: 404 }));
  log.log(entry({ status: 502 }));
  log.log(entry({ status: 0 }));
  log.log(entry({ status: 429, outcome: "rate_limited" }));
  assert.deepEqual(lines.map((line) => JSON.parse(line).status), [502, 0, 429]);
  assert.equal(log.written, 3);
  assert.equal(log.sampledOut, 2);
});

Deno.test("AccessLog.log() at sample 1 writes everything", () => {
  const { log, lines } = collecting(1, () => 0.999);
  for (const status of [200, 301, 404, 503]) log.log(entry({ status }));
  assert.equal(lines.length, 4);
  assert.equal(log.sampledOut, 0);
});

Deno.test("AccessLog.log() keeps an ordinary entry when random() is below the sample", () => {
  const draws = [0.1, 0.5, 0.24, 0.9];
  const { log, lines } = collecting(0.25, () => draws.shift() ?? 1);
  for (const id of ["a", "b", "c", "d"]) log.log(entry({ request_id: id }));
  assert.deepEqual(lines.map((line) => JSON.parse(line).request_id), ["a", "c"]);
  assert.equal(log.sampledOut, 2);
});

Deno.test("AccessLog.log() writes nothing when disabled", () => {
  const lines: string[] = [];
  const log = new AccessLog({ enabled: false, sample: 1, write: (line) => lines.push(line) });
  log.log(entry({ status: 500 }));
  assert.equal(lines.length, 0);
  assert.equal(log.written, 0);
});

Deno.test("AccessLog.log() counts a failed write instead of throwing", () => {
  const log = new AccessLog({
    enabled: true,
    sample: 1,
    write: () => {
      throw new Error("EPIPE");
    },
  });
  log.log(entry());
  log.log(entry({ status: 500 }));
  assert.equal(log.errors, 2);
  assert.equal(log.written, 0);
});

Deno.test("AccessLog refuses a sample outside 0..1", () => {
  for (const sample of [-0.1, 1.5, NaN]) {
    assert.throws(() => new AccessLog({ enabled: true, sample }), RangeError, String(sample));
  }
});

Deno.test("shouldLog() skips every local_health request and provider_health /healthz probes", () => {
  const table: [string, string, boolean][] = [
    ["public", "/", true],
    ["public", "/healthz", true],
    ["local_health", "/metrics", false],
    ["local_health", "/healthz", false],
    ["local_health", "/anything", false],
    ["provider_health", "/healthz", false],
    ["provider_health", "/healthz?deep=1", false],
    ["provider_health", "/ready", true],
    ["provider_health", "/healthzz", true],
  ];
  for (const [lane, path, expected] of table) {
    assert.equal(shouldLog(lane, path), expected, `${lane} ${path}`);
  }
});

Deno.test("userAgentField() cuts at 128 characters and escapes control characters", () => {
  assert.equal(
    userAgentField("Mozilla/5.0 (X11; Linux x86_64)"),
    "Mozilla/5.0 (X11; Linux x86_64)",
  );
  assert.equal(userAgentField(undefined), undefined);
  assert.equal(userAgentField(""), "");
  assert.equal(userAgentField("a\u001b[2Jb\u007fc\u009bd\te"), "a\\x1b[2Jb\\x7fc\\x9bd\\x09e");
  assert.equal(userAgentField("line\r\nforged: yes"), "line\\x0d\\x0aforged: yes");
  const long = userAgentField("x".repeat(1000))!;
  assert.equal(long.length, USER_AGENT_CHARS);
  assert.equal(USER_AGENT_CHARS, 128);
  assert.equal(userAgentField(["a", "b"]), "a, b");
  // Escaped, then cut: never more than 128 characters, never half of an escape.
  assert.equal(userAgentField("x".repeat(124) + "\u0001"), "x".repeat(124) + "\\x01");
  assert.equal(userAgentField("x".repeat(125) + "\u0001yz"), "x".repeat(125));
  assert.equal(userAgentField("\u0001".repeat(100))!.length, 128);
});

Deno.test("protocolField() names HTTP/1.0, HTTP/1.1 and HTTP/2", () => {
  assert.equal(protocolField("1.0"), "HTTP/1.0");
  assert.equal(protocolField("1.1"), "HTTP/1.1");
  assert.equal(protocolField("2.0"), "HTTP/2");
  assert.equal(protocolField(undefined), "HTTP/1.1");
});

Deno.test("readLine() turns a 'portcullis: …' sentence into a level and a message", () => {
  const table: [string, string, string][] = [
    ["portcullis: ready: node e1, 3 lanes", "info", "ready: node e1, 3 lanes"],
    ["portcullis: warning: cannot watch /etc", "warn", "cannot watch /etc"],
    [
      "portcullis: error: public request worker 2 stopped",
      "error",
      "public request worker 2 stopped",
    ],
    ["portcullis: info: attempt failed; retried", "info", "attempt failed; retried"],
    [
      "portcullis: egress: info: instance 1 failed (retried)",
      "info",
      "egress: info: instance 1 failed (retried)",
    ],
    ["portcullis: tls: x warning: y", "warn", "tls: x warning: y"],
    ["portcullis: config rejected: t.yaml: bad", "error", "config rejected: t.yaml: bad"],
    ["portcullis: request r1 failed internally", "error", "request r1 failed internally"],
    ["portcullis: config accepted, generation 3", "info", "config accepted, generation 3"],
    ["no prefix at all", "info", "no prefix at all"],
  ];
  for (const [text, level, msg] of table) assert.deepEqual(readLine(text), { level, msg }, text);
});

Deno.test("diagnostics() writes JSON lines: time, level, msg first, then the line's fields", () => {
  const lines: string[] = [];
  const now = () => new Date("2025-01-01T00:00:00.000Z");
  const log = diagnostics({ write: (line) => lines.push(line), now, fields: { worker: 2 } });
  log.line("portcullis: warning: salt unreadable");
  log.error("request r1 failed", { request_id: "r1", time: "forged", msg: "forged" });
  log.info("multi\nline \u001b[31m");
  assert.deepEqual(lines.map((line) => JSON.parse(line)), [
    { time: "2025-01-01T00:00:00.000Z", level: "warn", msg: "salt unreadable", worker: 2 },
    {
      time: "2025-01-01T00:00:00.000Z",
      level: "error",
      msg: "request r1 failed",
      worker: 2,
      request_id: "r1",
    },
    { time: "2025-01-01T00:00:00.000Z", level: "info", msg: "multi\nline \u001b[31m", worker: 2 },
  ]);
  for (const line of lines) {
    assert.ok(!line.includes("\n"), "one physical line each");
    assert.deepEqual(Object.keys(JSON.parse(line)).slice(0, 3), ["time", "level", "msg"]);
  }
  assert.equal(
    formatLine(now(), "info", "x", { skipped: undefined }),
    '{"time":"2025-01-01T00:00:00.000Z","level":"info","msg":"x"}',
  );
});

Deno.test("diagnostics() filters by each level", () => {
  const expected: Record<string, string[]> = {
    error: ["e"],
    warn: ["e", "w"],
    info: ["e", "w", "i"],
    debug: ["e", "w", "i", "d"],
  };
  for (const level of ["error", "warn", "info", "debug"] as const) {
    const seen: string[] = [];
    const log = diagnostics({ level, write: (line) => seen.push(JSON.parse(line).msg) });
    log.error("e");
    log.warn("w");
    log.info("i");
    log.debug("d");
    assert.deepEqual(seen, expected[level], level);
  }
  const sunk: string[] = [];
  const sink = diagnosticSink({ level: "warn", write: (line) => sunk.push(line) });
  sink("portcullis: listening");
  sink("portcullis: cannot bind");
  assert.deepEqual(sunk.map((line) => JSON.parse(line).level), ["error"]);
});

Deno.test("diagnostics() refuses an unknown level and survives a failing writer", () => {
  assert.throws(() => diagnostics({ level: "loud" as "info" }), RangeError);
  const log = diagnostics({
    level: "debug",
    write: () => {
      throw new Error("closed");
    },
  });
  log.error("still fine");
  log.line("portcullis: still fine");
});
