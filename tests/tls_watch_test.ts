/**
 * The certificate watch (`tls.watch: true`) as an operator runs it: `serve config.yaml` from the
 * config's folder (the layout `scripts/unit.ts` writes, certificate paths relative to it) through
 * `scripts/portcullis`, so the flags are derived in that folder too. A replaced certificate is
 * served to the next handshake; a certificate folder that does not exist at boot is watched once
 * it is created. What is served is read from the handshake's peer certificate.
 *
 * @module
 */
import assert from "node:assert/strict";
import { fingerprintOf, handshake, type IssuedCertificate, TestPki } from "./fixtures/certs.ts";
import { freePorts, proofConfig, writeConfig } from "./fixtures/gateway.ts";
import { eventually, ServedProcess } from "./fixtures/served_process.ts";

const LAUNCHER = new URL("../scripts/portcullis", import.meta.url).pathname;

/**
 * An edge whose public lane serves `certs/a.test.{crt,key}` (relative to its config), with an ACME
 * companion listener: an ACME client writes the certificates after the first boot, so until then
 * they may be missing and the bootstrap certificate (for `tls.name`) is served.
 */
async function watchedEdge(
  body: (
    edge: { dir: string; port: number; pki: TestPki; served: () => Promise<string> },
  ) => Promise<void>,
): Promise<void> {
  const pki = await TestPki.create();
  const [publicPort, healthPort, acmePort] = freePorts(3);
  const ports = { public: publicPort, local_health: healthPort, provider_health: 0 };
  const config = proofConfig(ports) as Record<string, Record<string, Record<string, unknown>>>;
  config.lanes.public.tls = {
    name: "a.test",
    watch: true,
    certificates: [{ cert_file: "certs/a.test.crt", key_file: "certs/a.test.key", default: true }],
  };
  config.lanes.public.acme_http = { hostname: "127.0.0.1", port: acmePort, challenge_dir: "acme" };
  const { dir } = await writeConfig(config, [
    { host: "a.test", routes: [{ match: { path: "/" }, respond: { body: "tenant a.test" } }] },
  ]);
  await Deno.mkdir(`${dir}/acme`);
  try {
    const served = async () =>
      (await handshake(publicPort, { servername: "a.test", insecure: true })).fingerprint;
    await body({ dir, port: publicPort, pki, served });
  } finally {
    await pki.dispose();
    await Deno.remove(dir, { recursive: true }).catch(() => {});
  }
}

/** Writes `certificate` as `certs/a.test.{crt,key}` under `dir`, key first, each renamed in. */
async function install(dir: string, certificate: IssuedCertificate): Promise<void> {
  await Deno.mkdir(`${dir}/certs`, { recursive: true });
  const key = `${dir}/certs/a.test.key`;
  await Deno.writeTextFile(`${key}.new`, certificate.keyPem, { mode: 0o600 });
  await Deno.chmod(`${key}.new`, 0o600);
  await Deno.rename(`${key}.new`, key);
  await Deno.writeTextFile(`${dir}/certs/a.test.crt.new`, certificate.certPem);
  await Deno.rename(`${dir}/certs/a.test.crt.new`, `${dir}/certs/a.test.crt`);
}

/** `scripts/portcullis serve config.yaml`, run in the config's folder. */
async function serveRelative(dir: string): Promise<ServedProcess> {
  const gateway = new ServedProcess(LAUNCHER, ["serve", "config.yaml"], {
    cwd: dir,
    env: { DENO: Deno.execPath() },
  });
  try {
    await gateway.line(/ready: node proof-edge/);
  } catch (error) {
    await gateway.dispose();
    throw error;
  }
  return gateway;
}

Deno.test("tls watch: a relative config path picks up a replaced certificate", async () => {
  await watchedEdge(async ({ dir, pki, served }) => {
    const first = await pki.issue("a.test", { unwritten: true });
    await install(dir, first);
    const gateway = await serveRelative(dir);
    try {
      assert.equal(await served(), fingerprintOf(first.certPem));
      const renewed = await pki.issue("a.test", { file: "renewed", unwritten: true });
      await install(dir, renewed);
      assert.ok(
        await eventually(async () => await served() === fingerprintOf(renewed.certPem), 5000),
        `the replaced certificate was not served:\n${gateway.stderr}`,
      );
      assert.doesNotMatch(gateway.stderr, /cannot watch|NotCapable/);
    } finally {
      gateway.signal("SIGTERM");
      await gateway.exit(10_000);
      await gateway.dispose();
    }
  });
});

Deno.test("tls watch: a certificate folder created after boot is watched once it exists", async () => {
  await watchedEdge(async ({ dir, pki, served }) => {
    const gateway = await serveRelative(dir);
    try {
      await gateway.line(/certificate folder \W*\S*\/certs\W* does not exist yet/);
      const bootstrap = await served();
      const issued = await pki.issue("a.test", { unwritten: true });
      assert.notEqual(bootstrap, fingerprintOf(issued.certPem), "the bootstrap certificate first");
      await install(dir, issued);
      assert.ok(
        await eventually(async () => await served() === fingerprintOf(issued.certPem), 5000),
        `the certificate in the new folder was not served:\n${gateway.stderr}`,
      );
      const renewed = await pki.issue("a.test", { file: "renewed", unwritten: true });
      await install(dir, renewed);
      assert.ok(
        await eventually(async () => await served() === fingerprintOf(renewed.certPem), 5000),
        "and the folder is watched from then on",
      );
    } finally {
      gateway.signal("SIGTERM");
      await gateway.exit(10_000);
      await gateway.dispose();
    }
  });
});
