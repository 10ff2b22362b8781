/**
 * `https://` backends end to end: a real TLS upstream with the test CA's certificate, reached
 * through the SOCKS fixture (the name resolved by the instance, TLS inside the tunnel) and
 * directly. What the upstream saw — SNI, head, the client certificate — is the evidence. Then every
 * way a backend's TLS can be wrong (an untrusted issuer, an expired certificate, another name, a
 * client certificate demanded and not shown): each is 502 `upstream_tls` with the cause in the log
 * and nothing of it in the body, the backend charged and the instance not; nothing reached the
 * upstream, so a POST goes on to the next backend. And the config rules of `proxy.tls`.
 *
 * @module
 */
import assert from "node:assert/strict";
import { TestPki } from "./fixtures/certs.ts";
import { configErrorOf, tenantsDir } from "./fixtures/config_files.ts";
import { failure, type ProxyEdge, withProxyEdge } from "./fixtures/proxy_edge.ts";
import { TlsUpstream } from "./fixtures/tls_upstream.ts";
import { loadTenants } from "../src/proxy/tenants.ts";
import { formatProblem } from "../src/config/problems.ts";

const NAME = "backend.test";

/** One TLS upstream of `pki`'s, its certificate and an optional client CA; stopped after `fn`. */
async function withUpstream(
  pki: TestPki,
  options: { name?: string; lifetimeMs?: number; clientCa?: string; file?: string },
  fn: (upstream: TlsUpstream) => Promise<void>,
): Promise<void> {
  const certificate = await pki.issue(options.name ?? NAME, {
    lifetimeMs: options.lifetimeMs,
    file: options.file,
  });
  const upstream = await TlsUpstream.start(certificate, { clientCa: options.clientCa });
  try {
    await fn(upstream);
  } finally {
    await upstream.stop();
  }
}

/** A route proxying `/api/` to `https://backend.test:<port>` through one SOCKS instance. */
function viaSocks(port: number, tls: Record<string, unknown>, files: Record<string, string>) {
  return {
    resolve: () => ({ [NAME]: { hostname: "127.0.0.1", port } }),
    files,
    routes: () => [{
      name: "api",
      match: { prefix: "/api/" },
      proxy: {
        backends: [{ url: `https://${NAME}:${port}` }],
        rewrite: { strip_prefix: "/api" },
        tls,
      },
    }],
  };
}

/** A route proxying `/api/` to `https://127.0.0.1:<port>` directly (no SOCKS), trusting `ca`. */
function direct(port: number, tls: Record<string, unknown>, ca: string) {
  return {
    socks: [],
    files: { "upstream-ca.pem": ca },
    egress: () => ({ direct: [`127.0.0.1:${port}`] }),
    routes: () => [{
      name: "api",
      match: { prefix: "/api/" },
      proxy: {
        backends: [{ url: `https://127.0.0.1:${port}` }],
        rewrite: { strip_prefix: "/api" },
        tls,
      },
    }],
  };
}

/** The log lines naming an upstream_tls failure. */
function tlsFailures(p: ProxyEdge): string[] {
  return p.t.lines.filter((line) => line.includes("upstream_tls after"));
}

Deno.test("upstream TLS: an https backend through SOCKS is verified, named by SNI, and served", async () => {
  const pki = await TestPki.create();
  await withUpstream(pki, {}, async (upstream) => {
    const setup = {
      ...viaSocks(upstream.port, { ca_file: "upstream-ca.pem" }, {
        "upstream-ca.pem": pki.ca.certPem,
      }),
      // Three clients one after another: without a settle time each takes the one connection.
      egress: () => ({ reuse_settle_ms: 0 }),
    };
    await withProxyEdge(setup, async (p) => {
      for (let i = 0; i < 3; i++) {
        const response = await p.send({ path: `/api/items?i=${i}` });
        assert.equal(response.status, 200, response.body);
        assert.equal(response.body, TlsUpstream.body(NAME));
      }
      assert.deepEqual(upstream.servernames, [NAME], "one handshake, kept alive for all three");
      assert.match(upstream.heads[0], /^GET \/items\?i=0 HTTP\/1\.1\r\n/);
      assert.match(upstream.heads[0], new RegExp(`\\r\\nhost: ${NAME}:${upstream.port}`, "i"));
      // The instance resolved the name: TLS ran inside the tunnel, end to end.
      assert.deepEqual(p.socks[0].connects.map((c) => [c.host, c.atyp]), [[NAME, "domain"]]);
    });
  });
});

Deno.test("upstream TLS: direct to an address, verified against server_name", async () => {
  const pki = await TestPki.create();
  await withUpstream(pki, {}, async (upstream) => {
    const tls = { ca_file: "upstream-ca.pem", server_name: NAME, min_version: "TLSv1.3" };
    await withProxyEdge(direct(upstream.port, tls, pki.ca.certPem), async (p) => {
      const response = await p.send({ path: "/api/x" });
      assert.equal(response.status, 200, response.body);
      assert.deepEqual(upstream.servernames, [NAME]);
    });
  });
});

Deno.test("upstream TLS: untrusted, expired and misnamed certificates are 502 upstream_tls, cause logged", async () => {
  const pki = await TestPki.create();
  const cases = [
    {
      what: "an issuer the runtime does not trust",
      cert: {},
      tls: {},
      cause: /self-signed|issuer|verify/i,
    },
    {
      what: "an expired certificate",
      cert: { lifetimeMs: -3_600_000 },
      tls: { ca_file: "upstream-ca.pem" },
      cause: /expired/i,
    },
    {
      what: "another name",
      cert: { name: "other.test" },
      tls: { ca_file: "upstream-ca.pem" },
      cause: /altname|does not match/i,
    },
  ];
  for (const c of cases) {
    await withUpstream(pki, c.cert, async (upstream) => {
      const setup = viaSocks(upstream.port, c.tls, { "upstream-ca.pem": pki.ca.certPem });
      await withProxyEdge(setup, async (p) => {
        const response = await p.send({ path: "/api/x" });
        failure(response, 502, "upstream_tls", ["certificate", "expired", NAME, "other.test"]);
        assert.deepEqual(upstream.heads, [], `${c.what}: no request reached the upstream`);
        const lines = tlsFailures(p);
        assert.equal(lines.length, 1, `${c.what}: ${p.t.lines.join("\n")}`);
        assert.match(lines[0], c.cause, c.what);
        assert.match(lines[0], /nothing was sent/);
        const egress = await p.egress();
        assert.equal(egress.instances[0].failures, 0, `${c.what}: the instance did its job`);
      });
    });
  }
});

Deno.test("upstream TLS: a backend demanding a client certificate gets the route's, and refuses none", async () => {
  const pki = await TestPki.create();
  const client = await pki.issue("edge-client", { file: "client" });
  await withUpstream(pki, { clientCa: pki.ca.certPem }, async (upstream) => {
    const files = {
      "upstream-ca.pem": pki.ca.certPem,
      "client.crt": client.certPem,
      "client.key": client.keyPem,
    };
    const without = viaSocks(upstream.port, { ca_file: "upstream-ca.pem" }, files);
    await withProxyEdge(without, async (p) => {
      failure(await p.send({ path: "/api/x" }), 502, "upstream_tls");
      // TLS 1.3: the backend's alert comes after the client finished its side of the handshake
      // (and wrote the head), so the cause shows on the first read.
      assert.match(tlsFailures(p)[0], /CertificateRequired|certificate required/i);
      assert.deepEqual(upstream.heads, [], "the backend read no request");
    });
    const mtls = { ca_file: "upstream-ca.pem", cert_file: "client.crt", key_file: "client.key" };
    await withProxyEdge(viaSocks(upstream.port, mtls, files), async (p) => {
      const response = await p.send({ path: "/api/x" });
      assert.equal(response.status, 200, response.body);
      assert.deepEqual(upstream.clients, ["edge-client"]);
    });
  });
});

Deno.test("upstream TLS: a POST whose handshake failed goes to the next backend, sent once", async () => {
  const pki = await TestPki.create();
  await withUpstream(pki, { name: "other.test", file: "wrong" }, async (wrong) => {
    await withUpstream(pki, {}, async (right) => {
      await withProxyEdge({
        resolve: () => ({
          "wrong.test": { hostname: "127.0.0.1", port: wrong.port },
          [NAME]: { hostname: "127.0.0.1", port: right.port },
        }),
        files: { "upstream-ca.pem": pki.ca.certPem },
        routes: () => [{
          name: "api",
          match: { prefix: "/api/" },
          proxy: {
            // The first backend's certificate names other.test: its handshake fails before any
            // byte of the request is written, so even a POST may go on.
            backends: [{ url: `https://wrong.test:${wrong.port}`, weight: 1000 }, {
              url: `https://${NAME}:${right.port}`,
            }],
            rewrite: { strip_prefix: "/api" },
            tls: { ca_file: "upstream-ca.pem" },
          },
        }],
      }, async (p) => {
        const response = await p.send({ method: "POST", path: "/api/orders", body: "one" });
        assert.equal(response.status, 200, response.body);
        assert.deepEqual(wrong.heads, []);
        assert.equal(right.heads.length, 1);
        assert.match(right.heads[0], /^POST \/orders HTTP\/1\.1/);
      });
    });
  });
});

Deno.test("proxy.tls is refused naming file and field: without https backends, half a client pair, a bad PEM", async () => {
  const route = (tls: Record<string, unknown>, url = "https://api.test") =>
    `host: a.example\nroutes:\n  - name: api\n    match: { prefix: /api/ }\n    proxy:\n` +
    `      backends: [{ url: "${url}" }]\n      tls: ${JSON.stringify(tls)}\n`;
  const refused = async (tls: Record<string, unknown>, url?: string) => {
    const dir = await tenantsDir({ "a.example.yaml": route(tls, url), "bad.pem": "not a pem\n" });
    const error = await configErrorOf(loadTenants(dir), `accepted ${JSON.stringify(tls)}`);
    return error.problems.map((p) => formatProblem(p).replace(dir + "/", ""));
  };
  assert.match(
    (await refused({ ca_file: "bad.pem" }, "http://api.test"))[0],
    /routes\[0\]\.proxy\.tls: tls applies to https:\/\/ backends/,
  );
  assert.match(
    (await refused({ cert_file: "bad.pem" }))[0],
    /proxy\.tls\.cert_file: A client certificate needs both cert_file and key_file/,
  );
  assert.match(
    (await refused({ ca_file: "bad.pem" }))[0],
    /proxy\.tls\.ca_file: Not a usable PEM file/,
  );
  assert.match((await refused({ ca_file: "../outside.pem" }))[0], /inside the tenants folder/);
});

Deno.test("proxy.tls refuses a key others may read, and a key that is not the certificate's", async () => {
  const pki = await TestPki.create();
  const [a, b] = [await pki.issue("a.client"), await pki.issue("b.client")];
  const route = (key: string) =>
    `host: a.example\nroutes:\n  - name: api\n    match: { prefix: /api/ }\n    proxy:\n` +
    `      backends: [{ url: "https://api.test" }]\n` +
    `      tls: { cert_file: a.crt, key_file: ${key} }\n`;
  const dir = await tenantsDir({
    "a.example.yaml": route("b.key"),
    "a.crt": a.certPem,
    "b.key": b.keyPem,
  });
  const open = await configErrorOf(loadTenants(dir), "accepted a key others may read");
  assert.match(
    formatProblem(open.problems[0]),
    /proxy\.tls\.key_file: .*(mode|permission|others)/i,
  );
  await Deno.chmod(`${dir}/b.key`, 0o600);
  const other = await configErrorOf(loadTenants(dir), "accepted another certificate's key");
  assert.match(
    formatProblem(other.problems[0]),
    /proxy\.tls\.key_file: The key does not belong to cert_file's certificate/,
  );
});

Deno.test("upstream TLS: an address backend is checked against the certificate's addresses, no SNI sent", async () => {
  const pki = await TestPki.create();
  await withUpstream(pki, {}, async (upstream) => {
    const tls = { ca_file: "upstream-ca.pem" };
    await withProxyEdge(direct(upstream.port, tls, pki.ca.certPem), async (p) => {
      // The certificate names backend.test only: an address is not in it.
      failure(await p.send({ path: "/api/x" }), 502, "upstream_tls");
      assert.match(tlsFailures(p)[0], /127\.0\.0\.1|IP/);
      assert.deepEqual(upstream.servernames, [], "no handshake finished");
    });
  });
});
