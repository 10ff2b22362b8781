/**
 * The pool config: defaults, the rules across fields (each problem with file, field and value),
 * the permission grants as data, and the torrc of one instance.
 *
 * @module
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { ConfigError, formatProblem } from "../src/config/problems.ts";
import { readYaml } from "../src/config/yaml_file.ts";
import { isPoolFile, poolGrants, resolvePoolConfig } from "../src/torpool/config.ts";
import { instancePaths, torArgs, torrcText } from "../src/torpool/torrc.ts";

const BASE = `role: torpool
data_dir: data
api_socket: /run/pool/api.sock
socks_base_port: 9050
control_base_port: 9150
min_instances: 1
max_instances: 4
`;

async function load(text: string) {
  const dir = await Deno.makeTempDir({ prefix: "portcullis-pool-config-" });
  const file = join(dir, "pool.yaml");
  await Deno.writeTextFile(file, text);
  try {
    const source = await readYaml(file);
    if (Array.isArray(source)) throw new ConfigError(source);
    return { file, dir, isPool: isPoolFile(source), config: resolvePoolConfig(source) };
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

/** The problems a config is refused with, each as `path: message (got value)` without the file. */
async function problems(text: string): Promise<string[]> {
  const error = await load(text).then(() => undefined, (e) => e);
  assert.ok(error instanceof ConfigError, `refused: ${error}`);
  return error.problems.map((p) => formatProblem(p).replace(/^[^:]+:\d+:\d+: |^[^:]+: /, ""));
}

Deno.test("resolvePoolConfig() applies the defaults and resolves paths against the file", async () => {
  const { file, dir, isPool, config } = await load(BASE);
  assert.equal(isPool, true);
  assert.deepEqual(config, {
    file,
    torBinary: "/usr/sbin/tor",
    dataDir: join(dir, "data"),
    apiSocket: "/run/pool/api.sock",
    listen: "127.0.0.1",
    socksBasePort: 9050,
    controlBasePort: 9150,
    minInstances: 1,
    maxInstances: 4,
    probeIntervalMs: 30_000,
    deadRefusalMs: 5000,
    busyStreams: 32,
    scaleUpThreshold: 0.8,
    scaleDownThreshold: 0.2,
    scaleCooldownMs: 300_000,
    clientAuthDir: undefined,
  });
});

Deno.test("resolvePoolConfig() refuses overlapping port ranges, naming field and value", async () => {
  assert.deepEqual(
    await problems(BASE.replace("control_base_port: 9150", "control_base_port: 9052")),
    [
      "control_base_port: Control ports 9052–9055 overlap SOCKS ports 9050–9053 (each range is " +
      "max_instances wide) (got 9052)",
    ],
  );
  // Adjacent ranges are fine.
  assert.equal((await load(BASE.replace("9150", "9054"))).config.controlBasePort, 9054);
  assert.deepEqual(
    await problems(BASE.replace("socks_base_port: 9050", "socks_base_port: 65534")),
    [
      "socks_base_port: Instance 3 would listen on port 65537: with max_instances 4 the base must " +
      "be at most 65532 (got 65534)",
    ],
  );
});

Deno.test("resolvePoolConfig() refuses min above max and thresholds out of order", async () => {
  assert.deepEqual(await problems(BASE.replace("min_instances: 1", "min_instances: 5")), [
    "min_instances: Expected at most max_instances (4) (got 5)",
  ]);
  assert.deepEqual(
    await problems(`${BASE}scale_up_threshold: 0.3\nscale_down_threshold: 0.5\n`),
    [
      "scale_down_threshold: Expected less than scale_up_threshold (0.3), or the pool would grow " +
      "and shrink at the same load (got 0.5)",
    ],
  );
  assert.deepEqual(await problems(`${BASE}scale_up_threshold: 1.5\n`), [
    "scale_up_threshold: Expected a number from 0 to 1 (got 1.5)",
  ]);
});

Deno.test("resolvePoolConfig() refuses a relative tor_binary, a non-loopback listen, unknown fields", async () => {
  const found = await problems(
    `${BASE}tor_binary: tor\nlisten: 0.0.0.0\nmax_instance: 3\nprobe_interval_ms: 10\n`,
  );
  assert.deepEqual(
    found.toSorted(),
    [
      'tor_binary: Expected an absolute path (run is granted per path) (got "tor")',
      "listen: Expected a loopback address literal (127.0.0.0/8 or ::1): Tor's ports serve this " +
      'host only (got "0.0.0.0")',
      "probe_interval_ms: Expected a whole number from 50 to 3600000 (got 10)",
      "max_instance: Unknown field (a typo? unknown fields are refused, never ignored)",
    ].toSorted(),
  );
});

Deno.test("poolGrants() lists exactly run for Tor, the instances' ports, and the pool's paths", async () => {
  const { config } = await load(`${BASE}listen: "::1"\nmax_instances: 2\n`.replace(
    "max_instances: 4\n",
    "",
  ));
  const grants = poolGrants(config);
  const by = (name: string) => grants.filter((g) => g.name === name).map((g) => g.value);
  assert.deepEqual(by("run"), ["/usr/sbin/tor"]);
  assert.deepEqual(by("net"), [
    "[::1]:9050",
    "[::1]:9051",
    "[::1]:9150",
    "[::1]:9151",
    "unix:/run/pool/api.sock",
  ]);
  assert.deepEqual(by("read"), [config.file, config.dataDir, "/run/pool"]);
  assert.deepEqual(by("write"), [config.dataDir, "/run/pool"]);
  assert.equal(grants.length, 11);
});

Deno.test("torrcText() gives instance i its own folder, ports base+i, cookie auth and its owner", () => {
  const config = {
    dataDir: "/var/lib/pool",
    listen: "127.0.0.1",
    socksBasePort: 9050,
    controlBasePort: 9150,
  };
  const text = torrcText(config, 2, 4242);
  assert.deepEqual(text.split("\n").filter((l) => l && !l.startsWith("#")), [
    "DataDirectory /var/lib/pool/instance-2",
    "SocksPort 127.0.0.1:9052 ExtendedErrors IsolateSOCKSAuth",
    "ControlPort 127.0.0.1:9152",
    "CookieAuthentication 1",
    "CookieAuthFile /var/lib/pool/instance-2/control_auth_cookie",
    "ClientOnionAuthDir /var/lib/pool/instance-2/onion_auth",
    "__OwningControllerProcess 4242",
    "Log notice stdout",
    "AvoidDiskWrites 1",
    "RunAsDaemon 0",
    "ClientOnly 1",
    "SafeLogging 1",
  ]);
  assert.deepEqual(torArgs(instancePaths(config, 2)), [
    "-f",
    "/var/lib/pool/instance-2/torrc",
    "--defaults-torrc",
    "/dev/null",
  ]);
});
