/**
 * TLS, ACME and passthrough configuration: the permission flags derived from it (certificate and
 * challenge folders readable, companion listeners reachable) and the configs refused at planning
 * (two default certificates, passthrough tenants without a passthrough listener or with routes,
 * a passthrough backend with no way out, unknown or invalid TLS fields).
 *
 * @module
 */
import assert from "node:assert/strict";
import { LANES } from "../lanes/mod.ts";
import { formatFlags, requiredGrants } from "../src/boot/flags.ts";
import { loadConfig } from "../src/config/load.ts";
import { planEdge } from "../src/edge/plan.ts";
import { certEntry, TestPki, tlsTest } from "./fixtures/certs.ts";
import { configErrorOf } from "./fixtures/config_files.ts";
import { type ConfigDir, proofConfig, writeConfig } from "./fixtures/gateway.ts";
import type { ConfigObject } from "./fixtures/in_process.ts";

const PORTS = { public: 18443, local_health: 19901, provider_health: 0 };
const site = { host: "a.test", routes: [{ match: { path: "/" }, respond: { body: "a" } }] };
const shop = { host: "shop.test", passthrough: { backends: ["shop.onion:443"] } };

/** Writes the proof config edited by `edit`, with `tenants`, runs `body`, removes the folder. */
async function withConfig(
  edit: (config: ConfigObject) => void,
  tenants: Record<string, unknown>[],
  body: (dir: ConfigDir) => Promise<void>,
): Promise<void> {
  const config = proofConfig(PORTS) as ConfigObject;
  edit(config);
  const dir = await writeConfig(config, tenants);
  try {
    await body(dir);
  } finally {
    await Deno.remove(dir.dir, { recursive: true });
  }
}

/** The messages of the ConfigError that planning `dir` must raise. */
async function planProblems(dir: ConfigDir): Promise<string[]> {
  const error = await configErrorOf(
    loadConfig(dir.config).then((config) => planEdge(config, LANES)),
    "the config was accepted",
  );
  return error.problems.map((p) => `${p.path.join(".")}: ${p.message}`);
}

/** The values of one `--allow-<name>=a,b` flag. */
function flagValues(flags: string, name: string): string[] {
  const flag = flags.split(" ").find((f) => f.startsWith(`--allow-${name}=`));
  return flag ? flag.slice(`--allow-${name}=`.length).split(",") : [];
}

tlsTest(
  "tls config: flags grant read on the certificate and challenge folders, net on companions",
  async () => {
    const pki = await TestPki.create();
    try {
      await Deno.mkdir(`${pki.dir}/other`);
      const a = await pki.issue("a.test");
      const b = await pki.issue("b.test", { file: "other/b.test" });
      await withConfig(
        (config) => {
          config.lanes.public.tls = { certificates: [certEntry(a, true), certEntry(b)] };
          config.lanes.public.acme_http = {
            hostname: "127.0.0.1",
            port: 18080,
            challenge_dir: "acme",
          };
          config.lanes.public.passthrough = { listen: [{ hostname: "127.0.0.1", port: 18444 }] };
          config.egress = { socks: [{ hostname: "127.0.0.1", port: 19050 }] };
        },
        [site, shop],
        async (dir) => {
          const config = await loadConfig(dir.config);
          const flags = formatFlags(requiredGrants(config));
          const read = flagValues(flags, "read");
          for (const folder of [pki.dir, `${pki.dir}/other`, `${dir.dir}/acme`]) {
            assert.ok(read.includes(folder), `--allow-read has ${folder}: ${flags}`);
          }
          assert.ok(!read.includes(a.certFile), "folders, not files: a renewal replaces files");
          assert.ok(!read.some((entry) => entry === "/" || entry === ""), "nothing unscoped");
          const net = flagValues(flags, "net");
          for (const address of ["127.0.0.1:18443", "127.0.0.1:18080", "127.0.0.1:18444"]) {
            assert.ok(net.includes(address), `--allow-net has ${address}: ${flags}`);
          }
          assert.ok(net.includes("127.0.0.1:19050"), "the SOCKS instance the passthrough uses");
          assert.ok(!net.includes("shop.onion:443"), "a SOCKS-reached backend is never granted");
          const plan = await planEdge(config, LANES);
          assert.deepEqual(
            plan.lanes.map((lane) => lane.role),
            ["serve", "acme_http", "passthrough", "serve"],
          );
        },
      );
    } finally {
      await pki.dispose();
    }
  },
);

tlsTest("tls config: two certificates marked default are refused", async () => {
  await withConfig(
    (config) => {
      config.lanes.public.tls = {
        certificates: [
          { cert_file: "a.crt", key_file: "a.key", default: true },
          { cert_file: "b.crt", key_file: "b.key", default: true },
        ],
      };
    },
    [site],
    async (dir) => {
      const problems = await planProblems(dir);
      assert.deepEqual(problems, [
        "lanes.public.tls.certificates: At most one certificate can be the default",
      ]);
    },
  );
});

tlsTest(
  "tls config: a passthrough tenant without lanes.public.passthrough is refused",
  async () => {
    await withConfig(
      (config) => {
        config.egress = { socks: [{ hostname: "127.0.0.1", port: 19050 }] };
      },
      [site, shop],
      async (dir) => {
        const problems = await planProblems(dir);
        assert.equal(problems.length, 1, problems.join("\n"));
        assert.match(
          problems[0],
          /^passthrough: A passthrough tenant needs lanes\.public\.passthrough/,
        );
      },
    );
  },
);

tlsTest("tls config: a passthrough tenant with routes is refused", async () => {
  await withConfig(
    (config) => {
      config.egress = { socks: [{ hostname: "127.0.0.1", port: 19050 }] };
      config.lanes.public.passthrough = { listen: [{ hostname: "127.0.0.1", port: 18444 }] };
    },
    [site, { ...shop, routes: site.routes }],
    async (dir) => {
      const problems = await planProblems(dir);
      assert.ok(
        problems.some((p) =>
          p.includes("A passthrough tenant is never terminated, so it has no routes")
        ),
        problems.join("\n"),
      );
    },
  );
});

tlsTest(
  "tls config: a passthrough backend with no way out (no SOCKS, not direct) is refused",
  async () => {
    await withConfig(
      (config) => {
        config.lanes.public.passthrough = { listen: [{ hostname: "127.0.0.1", port: 18444 }] };
      },
      [site, shop],
      async (dir) => {
        const problems = await planProblems(dir);
        assert.deepEqual(problems.map((p) => p.split(":")[0]), ["passthrough.backends.0"]);
        assert.match(problems[0], /No way out to shop\.onion:443/);
      },
    );
    await withConfig(
      (config) => {
        config.lanes.public.passthrough = { listen: [{ hostname: "127.0.0.1", port: 18444 }] };
        config.egress = { direct: ["shop.onion:443"] };
      },
      [site, shop],
      async (dir) => {
        const plan = await planEdge(await loadConfig(dir.config), LANES);
        assert.ok(plan.tenants.get("shop.test")?.passthrough, "a direct backend is a way out");
      },
    );
  },
);

tlsTest("tls config: unknown and invalid TLS fields are refused by name", async () => {
  const cases: [ConfigObject, RegExp][] = [
    [{ certificate: [] }, /certificate/],
    [{ min_version: "TLSv1.1" }, /Expected "TLSv1\.2" or "TLSv1\.3"/],
    [{ name: "Not A Host" }, /host name/],
    [{ certificates: [{ cert_file: "a.crt" }] }, /key_file/],
  ];
  for (const [tls, expected] of cases) {
    await withConfig(
      (config) => {
        config.lanes.public.tls = tls;
      },
      [site],
      async (dir) => {
        const error = await configErrorOf(
          loadConfig(dir.config),
          `accepted ${JSON.stringify(tls)}`,
        );
        const text = error.problems.map((p) => `${p.path.join(".")}: ${p.message}`).join("\n");
        assert.match(text, /^lanes\.public\.tls/, text);
        assert.match(text, expected, text);
      },
    );
  }
});
