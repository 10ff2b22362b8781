/**
 * The door's config: what it resolves to, every problem naming file, field, value and line, and
 * the exact permission set it derives.
 *
 * @module
 */
import assert from "node:assert/strict";
import { formatFlags } from "../src/boot/flags.ts";
import { doorGrants, isDoorFile, loadDoorConfig } from "../src/door/config.ts";
import { ConfigError, type ConfigProblem, formatPath } from "../src/config/problems.ts";
import { parseYaml, type YamlFile } from "../src/config/yaml_file.ts";

const BASE = `role: door
node_id: door-1
listen:
  - { hostname: 0.0.0.0, port: 80 }
  - { hostname: 0.0.0.0, port: 443, tls: { cert_file: pki/door.crt, key_file: pki/door.key } }
cover_file: cover.html
health: { listen: [{ hostname: 127.0.0.1, port: 9921 }] }
hub:
  url: http://hub.internal:9443
  token_file: door.token
cache_dir: cache
`;

function source(text: string, file = "/etc/portcullis/door.yaml"): YamlFile {
  const parsed = parseYaml(file, text);
  if (Array.isArray(parsed)) throw new Error(JSON.stringify(parsed));
  return parsed;
}

/** The problems a config text has, as `path: message (value) @line`. */
function problemsOf(text: string): string[] {
  try {
    loadDoorConfig(source(text));
  } catch (error) {
    assert.ok(error instanceof ConfigError, String(error));
    return error.problems.map((p: ConfigProblem) => {
      assert.equal(p.file, "/etc/portcullis/door.yaml");
      const value = "value" in p && p.value !== undefined ? ` (${JSON.stringify(p.value)})` : "";
      return `${formatPath(p.path)}: ${p.message}${value} @${p.at?.split(":")[0]}`;
    });
  }
  throw new Error("Expected the config to be refused");
}

Deno.test("loadDoorConfig() resolves paths against the file's folder and applies defaults", () => {
  const parsed = source(BASE);
  assert.ok(isDoorFile(parsed));
  const config = loadDoorConfig(parsed);
  assert.equal(config.nodeId, "door-1");
  assert.equal(config.coverFile, "/etc/portcullis/cover.html");
  assert.equal(config.cacheDir, "/etc/portcullis/cache");
  assert.deepEqual(config.listen[1].tls, {
    certFile: "/etc/portcullis/pki/door.crt",
    keyFile: "/etc/portcullis/pki/door.key",
  });
  assert.equal(config.hub.address, "hub.internal:9443");
  assert.equal(config.hub.tokenFile, "/etc/portcullis/door.token");
  assert.equal(config.hub.graceMs, 30_000);
  assert.equal(config.hub.backoffMaxMs, 30_000);
  assert.equal(config.limits.headerBytes, 8192);
  assert.equal(isDoorFile(source("role: hub\n")), false);
});

Deno.test("loadDoorConfig() names file, field, value and line of each problem", () => {
  assert.deepEqual(
    problemsOf(
      BASE.replace("node_id: door-1", "node_id: door/1").replace("cache_dir", "cahce_dir"),
    ),
    [
      `node_id: Expected 1-63 letters, digits, '.', '_' or '-' ("door/1") @2`,
      "cache_dir: Required field is missing @1",
      "cahce_dir: Unknown field (a typo? unknown fields are refused, never ignored) @11",
    ],
  );
  assert.deepEqual(
    problemsOf(BASE.replace("port: 80 }", "port: 80, tls: {} }")),
    [
      "listen[0].tls.cert_file: Required field is missing @4",
      "listen[0].tls.key_file: Required field is missing @4",
    ],
  );
  assert.deepEqual(
    problemsOf(
      BASE.replace("  token_file: door.token", "  backoff_initial_ms: 500\n  backoff_max_ms: 100"),
    ),
    [
      "hub.token_file: An http hub authenticates this node by token: set token_file @9",
      "hub.backoff_initial_ms: The first delay is longer than the cap (100 ms) (500) @10",
    ],
  );
  assert.deepEqual(
    problemsOf(
      BASE.replace("http://hub.internal:9443", "https://hub.internal:9443")
        .replace("  token_file: door.token", "  token_file: t\n  register: { secret_file: s }"),
    ),
    [
      "hub.ca_file: An https hub authenticates this node by client certificate: set ca_file, " +
      "cert_file and key_file @9",
      "hub.cert_file: An https hub authenticates this node by client certificate: set ca_file, " +
      "cert_file and key_file @9",
      "hub.key_file: An https hub authenticates this node by client certificate: set ca_file, " +
      "cert_file and key_file @9",
      "hub.token_file: An https hub uses the client certificate, not a token @10",
    ],
  );
  assert.deepEqual(
    problemsOf(
      BASE.replace("  token_file: door.token", "  token_file: t\n  register: { secret_file: s }"),
    ),
    ["hub.register: Registration gives a client certificate: it needs an https hub @11"],
  );
  assert.deepEqual(
    problemsOf(BASE.replace("127.0.0.1, port: 9921", "10.0.0.1, port: 9921")),
    [
      "health.listen[0].hostname: The health listener shows the door's state: bind it to " +
      'loopback or a Unix socket ("10.0.0.1") @7',
    ],
  );
  assert.deepEqual(
    problemsOf(BASE.replace("9921", "443")),
    [
      "health.listen[0]: Overlaps listen[1] (0.0.0.0:443): each listener must be its own socket " +
      '("127.0.0.1:443") @7',
    ],
  );
  assert.deepEqual(
    problemsOf(
      BASE.replace(
        "url: http://hub.internal:9443",
        "url: http://hub.internal/x",
      ),
    ),
    [
      'hub.url: Expected http(s)://host:port, with the port and without a path ("http://hub.internal/x") @9',
    ],
  );
});

Deno.test("doorGrants() is exactly the listeners, the hub, and the door's own files", () => {
  const config = loadDoorConfig(source(BASE));
  assert.equal(
    formatFlags(doorGrants(config)),
    "--allow-net=0.0.0.0:80,0.0.0.0:443,127.0.0.1:9921,hub.internal:9443 " +
      "--allow-read=/etc/portcullis/door.yaml,/etc/portcullis/cover.html," +
      "/etc/portcullis/pki/door.crt,/etc/portcullis/pki/door.key,/etc/portcullis/door.token," +
      "/etc/portcullis/cache " +
      "--allow-write=/etc/portcullis/cache --ignore-env=LOG_STREAM,LOG_TOKENS",
  );
  const mtls = loadDoorConfig(source(
    BASE.replace("http://hub.internal:9443", "https://hub.internal:9443").replace(
      "  token_file: door.token",
      "  ca_file: pki/ca.crt\n  cert_file: pki/n.crt\n  key_file: pki/n.key\n" +
        "  register: { secret_file: pki/n.secret }",
    ),
  ));
  assert.equal(
    formatFlags(doorGrants(mtls)),
    "--allow-net=0.0.0.0:80,0.0.0.0:443,127.0.0.1:9921,hub.internal:9443 " +
      "--allow-read=/etc/portcullis/door.yaml,/etc/portcullis/cover.html," +
      "/etc/portcullis/pki/door.crt,/etc/portcullis/pki/door.key,/etc/portcullis/pki/ca.crt," +
      "/etc/portcullis/pki/n.crt,/etc/portcullis/pki/n.key,/etc/portcullis/cache," +
      // Registration and renewal write the pair through .new files (issue 31: a door's flags
      // lacked them and it could not register).
      "/etc/portcullis/pki/n.crt.new,/etc/portcullis/pki/n.key.new,/etc/portcullis/pki/n.secret " +
      "--allow-write=/etc/portcullis/cache,/etc/portcullis/pki/n.crt," +
      "/etc/portcullis/pki/n.crt.new,/etc/portcullis/pki/n.key,/etc/portcullis/pki/n.key.new," +
      "/etc/portcullis/pki/n.secret --ignore-env=LOG_STREAM,LOG_TOKENS",
  );
});
