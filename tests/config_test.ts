/**
 * Unit tests for the bootstrap config loader: `loadConfig()` on files written to a temp folder.
 *
 * @module
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { loadConfig, tenantsFolderOf } from "../src/config/load.ts";
import { ConfigError, type ConfigProblem } from "../src/config/problems.ts";
import { configErrorOf, MINIMAL, writeConfigText } from "./fixtures/config_files.ts";
import http from "node:http";
import { METHODS } from "../src/config/tenant_schema.ts";
import { closest, editDistance } from "../src/config/suggest.ts";

const ROOT = new URL("../", import.meta.url).pathname;

/** Loads `text` and returns the ConfigError it must raise. */
async function problemsOf(text: string): Promise<{ file: string; error: ConfigError }> {
  const file = await writeConfigText(text);
  const error = await configErrorOf(loadConfig(file), "loadConfig() accepted a bad config");
  return { file, error };
}

/** The problems, reduced to the fields a test compares. */
function brief(problems: readonly ConfigProblem[]) {
  return problems.map((p) => ({ path: p.path.join("/"), message: p.message, value: p.value }));
}

Deno.test("loadConfig() loads the example config with all three lanes", async () => {
  const file = join(ROOT, "deploy/example/config.yaml");
  const config = await loadConfig(file);
  assert.equal(config.file, file);
  assert.equal(config.nodeId, "example-edge");
  assert.equal(config.mode, "local");
  assert.equal(tenantsFolderOf(config)!, join(ROOT, "deploy/example/tenants"));
  assert.deepEqual(config.lanes.public?.listen, [
    { kind: "tcp", hostname: "127.0.0.1", port: 8080 },
  ]);
  assert.deepEqual(config.lanes.local_health?.listen, [
    { kind: "tcp", hostname: "127.0.0.1", port: 9901 },
  ]);
  assert.deepEqual(config.lanes.provider_health?.listen, [
    { kind: "tcp", hostname: "127.0.0.1", port: 9902 },
  ]);
  assert.equal(config.ledger.application_slots, 256);
  assert.deepEqual(config.ledger.lanes.provider_health?.rate, { per_second: 20, burst: 40 });
  assert.equal(config.timeouts.headerMs, 10_000);
});

Deno.test("loadConfig() names file, field path and value of a bad port", async () => {
  const { file, error } = await problemsOf(MINIMAL.replace("port: 8080", "port: 70000"));
  assert.equal(error.problems.length, 1);
  const [problem] = error.problems;
  assert.equal(problem.file, file);
  assert.deepEqual(problem.path, ["lanes", "public", "listen", 0, "port"]);
  assert.equal(problem.value, 70000);
  assert.equal(problem.message, "Expected a port number from 1 to 65535");
  assert.equal(problem.at, "7:38");
  assert.equal(
    error.message,
    `${file}:7:38: lanes.public.listen[0].port: Expected a port number from 1 to 65535 (got 70000)`,
  );
});

Deno.test("loadConfig() quotes a string value where a number is expected", async () => {
  const { error } = await problemsOf(MINIMAL.replace("per_connection: 4", 'per_connection: "4"'));
  assert.deepEqual(brief(error.problems), [
    { path: "ledger/per_connection", message: "Expected a whole number", value: "4" },
  ]);
  assert.match(
    error.message,
    /:8:\d+: ledger\.per_connection: Expected a whole number \(got "4"\)$/,
  );
});

Deno.test("loadConfig() refuses an unknown top-level key (typo protection)", async () => {
  const { file, error } = await problemsOf(`${MINIMAL}timeout: { header_ms: 5000 }\n`);
  assert.equal(error.problems.length, 1);
  const [problem] = error.problems;
  assert.equal(problem.file, file);
  assert.deepEqual(problem.path, ["timeout"]);
  assert.equal(problem.value, undefined);
  assert.match(problem.message, /^Unknown field/);
  assert.equal(problem.at?.split(":")[0], "9");
  assert.match(
    error.message,
    /:9:\d+: timeout: Unknown field \(a typo\? unknown fields are refused, never ignored\)$/,
  );
});

Deno.test("loadConfig() refuses an unknown key nested in a listener", async () => {
  const { error } = await problemsOf(
    MINIMAL.replace("port: 8080 }", "port: 8080, hostnmae: 10.0.0.1 }"),
  );
  assert.deepEqual(error.problems.map((p) => [p.path.join("/"), p.message]), [
    [
      "lanes/public/listen/0/hostnmae",
      "Unknown field (a typo? unknown fields are refused, never ignored)",
    ],
  ]);
  assert.equal(error.problems[0].at?.split(":")[0], "7");
});

Deno.test("loadConfig() refuses an unknown lane name", async () => {
  const { error } = await problemsOf(
    MINIMAL.replace(
      "lanes:\n",
      "lanes:\n  admin: { listen: [{ hostname: 127.0.0.1, port: 1 }] }\n",
    ),
  );
  assert.deepEqual(error.problems.map((p) => [p.path.join("/"), p.message]), [
    ["lanes/admin", "Unknown field (a typo? unknown fields are refused, never ignored)"],
  ]);
});

Deno.test("loadConfig() refuses localhost as a hostname: IP literals only", async () => {
  const { error } = await problemsOf(MINIMAL.replace("127.0.0.1", "localhost"));
  assert.deepEqual(brief(error.problems), [{
    path: "lanes/public/listen/0/hostname",
    message:
      "Expected an IP address literal such as 127.0.0.1 or ::1 (a name like localhost is ambiguous)",
    value: "localhost",
  }]);
  assert.equal(error.problems[0].at, "7:21");
});

Deno.test("loadConfig() accepts IPv6 literals as hostnames", async () => {
  const config = await loadConfig(await writeConfigText(MINIMAL.replace("127.0.0.1", '"::1"')));
  assert.deepEqual(config.lanes.public?.listen, [{ kind: "tcp", hostname: "::1", port: 8080 }]);
});

Deno.test("loadConfig() refuses an IPv6 zone index in a listener address", async () => {
  const { error } = await problemsOf(MINIMAL.replace("127.0.0.1", '"fe80::1%eth0"'));
  assert.deepEqual(brief(error.problems), [{
    path: "lanes/public/listen/0/hostname",
    message: "An IPv6 zone index (such as %eth0) cannot be used in a listener address",
    value: "fe80::1%eth0",
  }]);
});

Deno.test("loadConfig() locates a YAML syntax error by line and column", async () => {
  const { file, error } = await problemsOf(
    "node_id: unit-edge\nmode: local\nlanes: { public: [\n",
  );
  assert.ok(error.problems.length >= 1);
  for (const problem of error.problems) {
    assert.equal(problem.file, file);
    assert.deepEqual(problem.path, []);
    assert.match(problem.message, /^Invalid YAML: /);
    assert.match(problem.at ?? "", /^\d+:\d+$/);
  }
  assert.equal(error.problems[0].at, "4:1");
  assert.ok(error.message.startsWith(`${file}:4:1: (top level): Invalid YAML: `));
});

Deno.test("loadConfig() refuses a key given twice as a YAML error on its line", async () => {
  const { error } = await problemsOf(`${MINIMAL}node_id: other\n`);
  assert.deepEqual(brief(error.problems), [
    { path: "", message: "Invalid YAML: Map keys must be unique", value: undefined },
  ]);
  assert.equal(error.problems[0].at, "9:1");
});

Deno.test("loadConfig() says a missing file cannot be read, naming it", async () => {
  const dir = await Deno.makeTempDir({ prefix: "portcullis_config_" });
  const file = join(dir, "absent.yaml");
  const error = await loadConfig(file).catch((e: unknown) => e);
  assert.ok(error instanceof ConfigError);
  assert.deepEqual(error.problems, [
    { file, path: [], message: "Cannot read file: no such file or directory" },
  ]);
  assert.equal(error.message, `${file}: (top level): Cannot read file: no such file or directory`);
});

Deno.test("loadConfig() says 'Required field is missing' and points at the parent", async () => {
  const { file, error } = await problemsOf(
    MINIMAL.replace("node_id: unit-edge\n", "").replace("inflight_bytes: 1048576, ", ""),
  );
  assert.deepEqual(error.problems.map((p) => [p.path.join("/"), p.message, p.at]), [
    ["node_id", "Required field is missing", "1:1"],
    ["ledger/inflight_bytes", "Required field is missing", "7:9"],
  ]);
  for (const problem of error.problems) assert.equal("value" in problem, false);
  assert.equal(
    error.message,
    `${file}:1:1: node_id: Required field is missing\n` +
      `${file}:7:9: ledger.inflight_bytes: Required field is missing`,
  );
});

Deno.test("loadConfig() says a listener without a port is missing its port", async () => {
  const { error } = await problemsOf(MINIMAL.replace(", port: 8080", ""));
  assert.deepEqual(brief(error.problems), [
    { path: "lanes/public/listen/0/port", message: "Required field is missing", value: undefined },
  ]);
});

Deno.test("loadConfig() reports several problems in one error, in file order", async () => {
  const text = MINIMAL
    .replace("node_id: unit-edge", "node_id: -bad")
    .replace("mode: local", "mode: cloud")
    .replace("port: 8080", "port: 0")
    .replace("application_slots: 16", "application_slots: 0");
  const { file, error } = await problemsOf(text);
  assert.deepEqual(error.problems.map((p) => [p.path.join("/"), p.value]), [
    ["node_id", "-bad"],
    ["mode", "cloud"],
    ["lanes/public/listen/0/port", 0],
    ["ledger/application_slots", 0],
  ]);
  const lines = error.message.split("\n");
  assert.equal(lines.length, 4);
  for (const line of lines) assert.ok(line.startsWith(`${file}:`), line);
  assert.match(lines[1], /: mode: Expected "local" or "remote" \(got "cloud"\)$/);
});

Deno.test("loadConfig() refuses an empty listener list and a lane without public", async () => {
  const { error } = await problemsOf(
    MINIMAL.replace(/lanes:\n[\s\S]*?(?=ledger)/, "lanes:\n  local_health: { listen: [] }\n"),
  );
  assert.deepEqual(brief(error.problems), [
    {
      path: "lanes/public",
      message: "Required field is missing",
      value: undefined,
    },
    {
      path: "lanes/local_health/listen",
      message: "A lane needs at least one listener (leave the lane out to disable it)",
      value: [],
    },
  ]);
});

Deno.test("loadConfig() refuses a socket path holding a comma", async () => {
  const { error } = await problemsOf(MINIMAL.replace(
    "ledger:",
    '  local_health: { listen: [{ path: "a,b.sock" }] }\nledger:',
  ));
  assert.deepEqual(brief(error.problems), [{
    path: "lanes/local_health/listen/0/path",
    message: "A socket path cannot hold a comma, NUL or newline",
    value: "a,b.sock",
  }]);
});

Deno.test("loadConfig() refuses a zero footprint as an error, never unbounded", async () => {
  const { error } = await problemsOf(
    `${MINIMAL.trimEnd()}\n`.replace(
      "per_connection: 4 }",
      "per_connection: 4, lanes: { public: { footprint_bytes: 0 } } }",
    ),
  );
  assert.deepEqual(brief(error.problems), [{
    path: "ledger/lanes/public/footprint_bytes",
    message:
      "Expected a byte count above 0 (zero is an error, never unbounded) from 1 to 2147483647",
    value: 0,
  }]);
});

Deno.test("loadConfig() folds client_ip_headers as hygiene does: lower case, _ as -", async () => {
  const config = await loadConfig(
    await writeConfigText(
      `${MINIMAL}forwarding: { client_ip_headers: [X_Custom_IP, CF-Ray-IP] }\n`,
    ),
  );
  assert.deepEqual(config.forwarding.clientIpHeaders, ["x-custom-ip", "cf-ray-ip"]);
});

Deno.test("loadConfig() refuses a client_ip_headers name the gateway writes itself", async () => {
  const names = ["X-Portcullis-Tenant", "x_forwarded_for", "X-Real-IP", "Host", "via", "TE"];
  const { error } = await problemsOf(
    `${MINIMAL}forwarding: { client_ip_headers: [${names.join(", ")}, X-Client-IP] }\n`,
  );
  assert.deepEqual(
    error.problems.map((p) => [p.path.join("."), p.value]),
    names.map((name, i) => [`forwarding.client_ip_headers.${i}`, name]),
  );
  assert.match(error.problems[0].message, /writes or removes this header itself/);
});

Deno.test("loadConfig() refuses a Via pseudonym that is not a token, and bad path rules", async () => {
  const { error } = await problemsOf(
    `${MINIMAL}forwarding: { via: "edge 7" }\npaths: { escaped_slashes: unescape, merge_slashes: 1 }\n`,
  );
  assert.deepEqual(error.problems.map((p) => p.path.join(".")).sort(), [
    "forwarding.via",
    "paths.escaped_slashes",
    "paths.merge_slashes",
  ]);
});

Deno.test("loadConfig() reports a remote config's mode and hub problems in check order", async () => {
  // Seven problems from five checks: the mode's fields, then the hub's authentication, then its
  // backoff. The order is part of the contract (the operator fixes them top to bottom), so
  // swapping two checks must fail here.
  const text = `${MINIMAL.replace("mode: local", "mode: remote")}hub:
  url: https://127.0.0.1:9443
  token_file: hub.token
  backoff_initial_ms: 5000
  backoff_max_ms: 1000
`;
  const { error } = await problemsOf(text);
  const certificate =
    "An https hub authenticates this node by client certificate: set ca_file, cert_file and key_file";
  assert.deepEqual(brief(error.problems), [
    {
      path: "tenants_dir",
      message: "Remote mode takes its tenants from the hub, not a folder",
      value: undefined,
    },
    { path: "cache_dir", message: "Remote mode needs cache_dir", value: undefined },
    { path: "hub/ca_file", message: certificate, value: undefined },
    { path: "hub/cert_file", message: certificate, value: undefined },
    { path: "hub/key_file", message: certificate, value: undefined },
    {
      path: "hub/token_file",
      message: "An https hub uses the client certificate, not a token",
      value: undefined,
    },
    {
      path: "hub/backoff_initial_ms",
      message: "The first delay is longer than the cap (1000 ms)",
      value: 5000,
    },
  ]);
});

Deno.test("loadConfig() reports a local config's mode problems in check order", async () => {
  const text = `${MINIMAL.replace("tenants_dir: tenants\n", "")}cache_dir: cache
hub: { url: "http://127.0.0.1:9080", token_file: hub.token }
`;
  const { error } = await problemsOf(text);
  assert.deepEqual(brief(error.problems), [
    { path: "tenants_dir", message: "Local mode needs tenants_dir", value: undefined },
    { path: "hub", message: 'hub is for mode "remote"', value: undefined },
    { path: "cache_dir", message: 'cache_dir is for mode "remote"', value: undefined },
  ]);
});

Deno.test("METHODS is exactly what node:http parses, so a route method can always arrive", () => {
  assert.deepEqual([...METHODS].sort(), [...http.METHODS].sort());
});

Deno.test("closest() suggests a slip (a swap, a letter, the case) and nothing far off", () => {
  assert.equal(editDistance("heda", "head"), 1, "a swap of neighbours is one step");
  assert.equal(editDistance("", "get"), 3);
  const table: [string, string | undefined][] = [
    ["HEDA", "HEAD"],
    ["GTE", "GET"],
    ["get", "GET"],
    ["POTS", "POST"],
    ["DELETEE", "DELETE"],
    ["PTACH", "PATCH"],
    ["X", undefined],
    ["TELEPORT", undefined],
    ["BREW", undefined],
  ];
  for (const [word, expected] of table) assert.equal(closest(word, METHODS), expected, word);
  assert.equal(closest("chek", ["serve", "check", "flags"]), "check");
  assert.equal(closest("torpol", ["serve", "check", "torpool"]), "torpool");
  assert.equal(closest("deploy", ["serve", "check", "flags"]), undefined);
});
