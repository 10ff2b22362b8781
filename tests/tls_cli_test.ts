/**
 * TLS through the real command line: `main.ts serve` run with exactly the flags `main.ts flags`
 * derives, certificates generated at test time in a folder outside the config folder. It proves the
 * derived `--allow-read` of the certificate folder is enough to load, reload and watch them.
 *
 * @module
 */
import assert from "node:assert/strict";
import {
  certEntry,
  fingerprintOf,
  h2Request,
  handshake,
  TestPki,
  TlsClient,
  writeCertificate,
} from "./fixtures/certs.ts";
import { boundedTest } from "./fixtures/bounded_test.ts";
import { ADMIN_AUTH, freePorts, Gateway, proofConfig, writeConfig } from "./fixtures/gateway.ts";
import { json, request } from "./fixtures/http_client.ts";
import { waitFor } from "./fixtures/in_process.ts";
import { messages } from "./fixtures/diag_lines.ts";

/**
 * The bound of the whole test: its flags are derived and a gateway process started (whose wait for
 * ready gives up after 20 s); alone it takes 2–3 s at a load of 8 on two cores, and the full suite
 * runs test files in parallel.
 */
const LIMIT_MS = 30_000;
/** How long the watch may take to serve a renewed certificate (it settles 250 ms, then reloads). */
const RENEWAL_MS = 10_000;

boundedTest(
  "tls cli: serve with the derived flags loads, serves, reloads and watches certificates",
  async () => {
    const pki = await TestPki.create();
    let gateway: Gateway | undefined;
    try {
      const a = await pki.issue("a.test");
      const [publicPort, healthPort] = freePorts(2);
      const ports = { public: publicPort, local_health: healthPort, provider_health: 0 };
      const config = proofConfig(ports) as Record<string, Record<string, Record<string, unknown>>>;
      config.lanes.public.tls = { certificates: [certEntry(a, true)], http2: true };
      const dir = await writeConfig(config, [
        { host: "a.test", routes: [{ match: { path: "/" }, respond: { body: "tenant a.test" } }] },
      ]);
      gateway = await Gateway.start(dir, ports);
      const read = gateway.flags.find((flag) => flag.startsWith("--allow-read="))!;
      assert.ok(read.split("=")[1].split(",").includes(pki.dir), `derived: ${read}`);
      assert.ok(!gateway.flags.some((flag) => flag === "--allow-read" || flag === "-A"));
      assert.match(messages(gateway.stderr), /lane "public" listening on 127\.0\.0\.1:\d+ \(TLS\)/);

      const ca = [pki.ca.certPem];
      const served = await handshake(publicPort, { servername: "a.test", ca });
      assert.equal(served.subject, "a.test");
      assert.equal(served.fingerprint, fingerprintOf(a.certPem));
      const client = await TlsClient.open(publicPort, { servername: "a.test", ca });
      try {
        const response = await client.request({ headers: [["Host", "a.test"]] });
        assert.equal(response.status, 200);
        assert.equal(response.body, "tenant a.test");
      } finally {
        await client.close();
      }
      const h2 = await h2Request(publicPort, { servername: "a.test", authority: "a.test", ca });
      assert.equal(h2.alpn, "h2");
      assert.equal(h2.body, "tenant a.test");

      const reload = await request(healthPort, {
        method: "POST",
        path: "/v1/tls/reload",
        headers: [ADMIN_AUTH],
      });
      assert.deepEqual(json(reload).problems, [], "the files are readable under the derived flags");

      const renewed = await pki.issue("a.test", { file: "renewed", unwritten: true });
      await writeCertificate(renewed, a);
      await waitFor(
        async () => (await handshake(publicPort, { servername: "a.test", ca })).fingerprint,
        (fingerprint) => fingerprint === fingerprintOf(renewed.certPem),
        RENEWAL_MS,
      );
      assert.doesNotMatch(gateway.stderr, /NotCapable|not granted|cannot watch/i);
    } finally {
      await gateway?.dispose();
      await pki.dispose();
    }
  },
  LIMIT_MS,
);
