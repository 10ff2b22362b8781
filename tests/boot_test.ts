/**
 * Unit tests for the boot checks: the distinct-object check (`distinct.ts`) and the permission
 * flags derived from a config (`flags.ts`), including the `deno.json` start task that derives them
 * from the config it serves.
 *
 * @module
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import {
  canonicalIp,
  checkDistinctObjects,
  checkListeners,
  isLoopback,
  isWildcard,
  type LaneListener,
  overlaps,
} from "../src/boot/distinct.ts";
import { configuredLanes, formatFlags, requiredGrants } from "../src/boot/flags.ts";
import { type ListenerAddress, loadConfig } from "../src/config/load.ts";
import { assertDerivedTask, assertTaskExpands } from "./fixtures/derived_task.ts";

const ROOT = new URL("../", import.meta.url).pathname;
const EXAMPLE_FLAGS = "--allow-net=127.0.0.1:8080,127.0.0.1:9901,127.0.0.1:9902 " +
  "--allow-read=deploy/example/config.yaml,deploy/example/tenants,src,lanes,/etc/hosts " +
  "--allow-sys=hostname,networkInterfaces --ignore-env=LOG_STREAM,LOG_TOKENS";

const tcp = (hostname: string, port: number): ListenerAddress => ({ kind: "tcp", hostname, port });
const unix = (path: string): ListenerAddress => ({ kind: "unix", path });

Deno.test("canonicalIp() compresses IPv6, lower-cases it and unmaps IPv4-mapped addresses", () => {
  assert.equal(canonicalIp("127.0.0.1"), "127.0.0.1");
  assert.equal(canonicalIp("2001:DB8:0:0:0:0:0:1"), "2001:db8::1");
  assert.equal(canonicalIp("0:0:0:0:0:0:0:1"), "::1");
  assert.equal(canonicalIp("0:0:0:0:0:0:0:0"), "::");
  assert.equal(canonicalIp("::ffff:127.0.0.1"), "127.0.0.1");
  assert.equal(canonicalIp("::FFFF:192.168.1.1"), "192.168.1.1");
  assert.equal(canonicalIp("::ffff:7f00:1"), "127.0.0.1");
});

Deno.test("isLoopback() accepts 127.0.0.0/8 and ::1 in any spelling, nothing else", () => {
  for (const ip of ["127.0.0.1", "127.255.0.9", "::1", "0:0:0:0:0:0:0:1", "::ffff:127.0.0.2"]) {
    assert.equal(isLoopback(ip), true, ip);
  }
  for (const ip of ["0.0.0.0", "::", "128.0.0.1", "10.0.0.1", "::2", "::ffff:10.0.0.1"]) {
    assert.equal(isLoopback(ip), false, ip);
  }
});

Deno.test("isWildcard() recognises the any-address of both families", () => {
  assert.deepEqual(
    ["0.0.0.0", "::", "0:0::0", "::ffff:0.0.0.0", "127.0.0.1", "::1"].map(isWildcard),
    [true, true, true, true, false, false],
  );
});

Deno.test("overlaps() treats a wildcard as overlapping every address on its port", () => {
  assert.equal(overlaps(tcp("0.0.0.0", 8443), tcp("127.0.0.1", 8443)), true);
  assert.equal(overlaps(tcp("10.1.2.3", 8443), tcp("0.0.0.0", 8443)), true);
  assert.equal(overlaps(tcp("::", 8443), tcp("127.0.0.1", 8443)), true);
  assert.equal(overlaps(tcp("0.0.0.0", 8443), tcp("127.0.0.1", 8444)), false);
});

Deno.test("overlaps() compares IP literals in canonical form", () => {
  assert.equal(overlaps(tcp("::ffff:127.0.0.1", 80), tcp("127.0.0.1", 80)), true);
  assert.equal(overlaps(tcp("0:0:0:0:0:0:0:1", 80), tcp("::1", 80)), true);
  assert.equal(overlaps(tcp("127.0.0.1", 80), tcp("127.0.0.2", 80)), false);
  assert.equal(overlaps(tcp("::1", 80), tcp("127.0.0.1", 80)), false);
});

Deno.test("overlaps() compares unix paths after resolution and never with TCP", () => {
  assert.equal(overlaps(unix("/run/p/a.sock"), unix("/run/p/../p/./a.sock")), true);
  assert.equal(overlaps(unix("/run/p/a.sock"), unix("/run/p/b.sock")), false);
  assert.equal(overlaps(unix("/run/p/a.sock"), tcp("0.0.0.0", 80)), false);
  assert.equal(overlaps(tcp("0.0.0.0", 80), unix("/run/p/a.sock")), false);
});

Deno.test("checkListeners() accepts distinct listeners on every lane", () => {
  const listeners: LaneListener[] = [
    { lane: "public", index: 0, address: tcp("0.0.0.0", 443) },
    { lane: "public", index: 1, address: tcp("::", 8443) },
    { lane: "local_health", index: 0, address: tcp("127.0.0.1", 9901) },
    { lane: "local_health", index: 1, address: unix("/run/portcullis/local.sock") },
    { lane: "provider_health", index: 0, address: tcp("10.0.0.5", 9902) },
  ];
  assert.deepEqual(checkListeners(listeners), []);
});

Deno.test("checkListeners() refuses one address listed twice in one lane", () => {
  assert.deepEqual(
    checkListeners([
      { lane: "public", index: 0, address: tcp("127.0.0.1", 8080) },
      { lane: "public", index: 1, address: tcp("::ffff:127.0.0.1", 8080) },
    ]),
    [{
      lane: "public",
      index: 1,
      message: 'Cannot bind lane "public": address [::ffff:127.0.0.1]:8080 is listed twice in ' +
        'lane "public" (also as 127.0.0.1:8080)',
    }],
  );
});

Deno.test("checkListeners() refuses a cross-lane overlap, naming both lanes", () => {
  assert.deepEqual(
    checkListeners([
      { lane: "public", index: 0, address: tcp("0.0.0.0", 8443) },
      { lane: "provider_health", index: 0, address: tcp("192.0.2.1", 8443) },
      { lane: "local_health", index: 0, address: unix("/run/a.sock") },
      { lane: "provider_health", index: 1, address: unix("/run/x/../a.sock") },
    ]),
    [
      {
        lane: "provider_health",
        index: 0,
        message: 'Cannot bind lane "provider_health": address 192.0.2.1:8443 overlaps lane ' +
          '"public" (0.0.0.0:8443)',
      },
      {
        lane: "provider_health",
        index: 1,
        message: 'Cannot bind lane "provider_health": address unix:/run/x/../a.sock overlaps ' +
          'lane "local_health" (unix:/run/a.sock)',
      },
    ],
  );
});

Deno.test("checkListeners() keeps local_health on loopback or a unix socket", () => {
  const problems = checkListeners([
    { lane: "local_health", index: 0, address: tcp("0.0.0.0", 9901) },
    { lane: "local_health", index: 1, address: tcp("2001:db8::1", 9901) },
    { lane: "local_health", index: 2, address: tcp("::1", 9911) },
    { lane: "provider_health", index: 0, address: tcp("192.0.2.1", 9902) },
  ]);
  assert.deepEqual(problems.map((p) => [p.lane, p.index, p.message]), [
    [
      "local_health",
      0,
      'Cannot bind lane "local_health": address 0.0.0.0:9901 is not loopback ' +
      "(use 127.0.0.1, ::1 or a Unix socket path)",
    ],
    [
      "local_health",
      1,
      'Cannot bind lane "local_health": address [2001:db8::1]:9901 is listed twice in lane ' +
      '"local_health" (also as 0.0.0.0:9901)',
    ],
    [
      "local_health",
      1,
      'Cannot bind lane "local_health": address [2001:db8::1]:9901 is not loopback ' +
      "(use 127.0.0.1, ::1 or a Unix socket path)",
    ],
  ]);
});

Deno.test("checkDistinctObjects() refuses one server object under two grants", () => {
  const a = {};
  const b = {};
  assert.deepEqual(
    checkDistinctObjects([
      { lane: "public", index: 0, server: a },
      { lane: "local_health", index: 0, server: b },
      { lane: "provider_health", index: 0, server: a },
    ]),
    [{
      lane: "provider_health",
      index: 0,
      message: 'Cannot serve lane "provider_health": its listener is the same server object as ' +
        'lane "public"',
    }],
  );
  assert.deepEqual(checkDistinctObjects([{ lane: "public", index: 0, server: a }]), []);
});

Deno.test("formatFlags(requiredGrants()) prints the example config's exact flags", async () => {
  const before = Deno.cwd();
  Deno.chdir(ROOT);
  try {
    const config = await loadConfig("deploy/example/config.yaml");
    assert.deepEqual(configuredLanes(config), ["public", "local_health", "provider_health"]);
    const grants = requiredGrants(config);
    assert.deepEqual(grants.map((g) => [g.name, g.value, g.purpose]), [
      ["net", "127.0.0.1:8080", 'lane "public" listener'],
      ["net", "127.0.0.1:9901", 'lane "local_health" listener'],
      ["net", "127.0.0.1:9902", 'lane "provider_health" listener'],
      ["read", "deploy/example/config.yaml", "config file"],
      ["read", "deploy/example/tenants", "tenants folder"],
      // The public lane runs in a request worker, whose modules load from the checkout.
      ["read", "src", "request worker code"],
      ["read", "lanes", "request worker code"],
      // What the own-listener check reads of the machine (names, host name, addresses).
      ["read", "/etc/hosts", "own-listener check (names of this machine)"],
      ["sys", "hostname", "own-listener check (the host name)"],
      ["sys", "networkInterfaces", "own-listener check (addresses of this machine)"],
      ["ignore-env", "LOG_STREAM", "yaml parser debug switch"],
      ["ignore-env", "LOG_TOKENS", "yaml parser debug switch"],
    ]);
    assert.equal(formatFlags(grants), EXAMPLE_FLAGS);
  } finally {
    Deno.chdir(before);
  }
});

Deno.test("requiredGrants() adds unix:<path> net plus read and write for a socket", async () => {
  const dir = await Deno.makeTempDir({ prefix: "portcullis_flags_" });
  const file = join(dir, "config.yaml");
  await Deno.writeTextFile(
    file,
    `node_id: f\nmode: local\ntenants_dir: tenants\nlanes:\n` +
      `  public: { listen: [{ hostname: "::1", port: 8443 }] }\n` +
      `  local_health: { listen: [{ path: run/local.sock }] }\n` +
      `ledger: { application_slots: 8, inflight_bytes: 1048576, per_connection: 2 }\n`,
  );
  const grants = requiredGrants(await loadConfig(file));
  const sock = join(dir, "run", "local.sock");
  assert.deepEqual(grants.slice(0, 4).map((g) => [g.name, g.value, g.purpose]), [
    ["net", "[::1]:8443", 'lane "public" listener'],
    ["net", `unix:${sock}`, 'lane "local_health" listener'],
    ["read", sock, 'lane "local_health" listener'],
    ["write", sock, 'lane "local_health" listener'],
  ]);
  const code = grants.filter((g) => g.purpose === "request worker code").map((g) => g.value);
  assert.equal(code.length, 2, "a protected lane: the public lane runs in a worker");
  assert.equal(
    formatFlags(grants),
    `--allow-net=[::1]:8443,unix:${sock} --allow-read=${sock},${file},${join(dir, "tenants")},` +
      `${code.join(",")},/etc/hosts --allow-write=${sock} ` +
      "--allow-sys=hostname,networkInterfaces --ignore-env=LOG_STREAM,LOG_TOKENS",
  );
});

Deno.test("formatFlags() lists each value once and leaves out absent flags", () => {
  assert.equal(
    formatFlags([
      { name: "read", value: "a", purpose: "x" },
      { name: "read", value: "a", purpose: "y" },
      { name: "net", value: "127.0.0.1:1", purpose: "z" },
    ]),
    "--allow-net=127.0.0.1:1 --allow-read=a",
  );
  assert.equal(formatFlags([]), "");
});

Deno.test("deno.json start task carries exactly the derived flags (compile: tests/deploy_test.ts)", async () => {
  const before = Deno.cwd();
  Deno.chdir(ROOT);
  let expected: string;
  try {
    expected = formatFlags(requiredGrants(await loadConfig("deploy/example/config.yaml")));
  } finally {
    Deno.chdir(before);
  }
  assert.equal(expected, EXAMPLE_FLAGS);
  const tasks = JSON.parse(await Deno.readTextFile(join(ROOT, "deno.json"))).tasks;
  // The task writes no permission flag itself: it serves the config its flags are derived from.
  assertDerivedTask(tasks, "start", {
    fixed: [
      "--no-prompt",
      "--v8-flags=--max-semi-space-size=1,--no-concurrent-array-buffer-sweeping",
    ],
    verb: "serve",
    config: "deploy/example/config.yaml",
  });
  await assertTaskExpands(tasks, "start", ROOT, expected);
});
