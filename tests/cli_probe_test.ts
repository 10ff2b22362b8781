/**
 * `portcullis probe <url>`: exit 0 on a 2xx answer and 1 on anything else, 2 for a URL that is
 * none; under an edge's own derived flags it reaches the `local_health` lane and nothing outside
 * the grant — what the container's HEALTHCHECK relies on.
 *
 * @module
 */
import assert from "node:assert/strict";
import https from "node:https";
import type { AddressInfo } from "node:net";
import { TestPki } from "./fixtures/certs.ts";
import {
  derivedFlags,
  freePorts,
  Gateway,
  proofConfig,
  runCli,
  runMain,
  writeConfig,
} from "./fixtures/gateway.ts";

const ROOT = new URL("../", import.meta.url).pathname;

/** Serves `status` on a loopback port for the length of `body`. */
async function withStatus(status: number, body: (url: string) => Promise<void>): Promise<void> {
  const server = Deno.serve(
    { hostname: "127.0.0.1", port: 0, onListen: () => {} },
    () => new Response("x", { status }),
  );
  try {
    await body(`http://127.0.0.1:${server.addr.port}/readyz`);
  } finally {
    await server.shutdown();
  }
}

Deno.test("cli probe: 2xx exits 0, any other status exits 1, naming the URL and status", async () => {
  await withStatus(200, async (url) => {
    const ok = await runMain(["probe", url]);
    assert.equal(ok.code, 0, ok.stderr);
    assert.equal(ok.stdout, `portcullis: probe: ${url}: 200\n`);
  });
  await withStatus(503, async (url) => {
    const draining = await runMain(["probe", url]);
    assert.equal(draining.code, 1);
    assert.equal(draining.stdout, "");
    assert.equal(draining.stderr, `portcullis: probe: ${url}: 503\n`);
  });
  await withStatus(302, async (url) => {
    assert.equal((await runMain(["probe", url])).code, 1, "a redirect is not followed");
  });
});

Deno.test("cli probe: a refused connection or no answer in time exits 1", async () => {
  const [closed] = freePorts(1);
  const refused = await runMain(["probe", `http://127.0.0.1:${closed}/readyz`]);
  assert.equal(refused.code, 1);
  assert.match(
    refused.stderr,
    /^portcullis: probe: http:\/\/127\.0\.0\.1:\d+\/readyz: .*ECONNREFUSED/,
  );
  // A listener that accepts and never answers: the probe gives up after its timeout.
  const silent = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const held: Deno.Conn[] = [];
  const accepting = (async () => {
    for await (const conn of silent) held.push(conn);
  })();
  try {
    const started = performance.now();
    const hung = await runMain(["probe", `http://127.0.0.1:${silent.addr.port}/`]);
    assert.equal(hung.code, 1);
    assert.match(hung.stderr, /no answer within 3000 ms/);
    assert.ok(performance.now() - started < 10_000);
  } finally {
    silent.close();
    for (const conn of held) conn.close();
    await accepting.catch(() => {});
  }
});

Deno.test("cli probe: https on loopback is not verified (a bootstrap certificate answers)", async () => {
  const pki = await TestPki.create();
  const leaf = await pki.issue("edge.test");
  const server = https.createServer(
    { cert: leaf.certPem, key: leaf.keyPem },
    (_request, response) => response.end("ok"),
  );
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  try {
    const { port } = server.address() as AddressInfo;
    const probed = await runMain(["probe", `https://127.0.0.1:${port}/healthz`]);
    assert.equal(probed.code, 0, probed.stderr);
  } finally {
    await new Promise((resolve) => server.close(resolve));
    await Deno.remove(pki.dir, { recursive: true });
  }
});

Deno.test("cli probe: what is not an http(s) URL is a usage error (exit 2)", async () => {
  for (const args of [["probe"], ["probe", "not a url"], ["probe", "ftp://127.0.0.1/"]]) {
    const result = await runMain(args);
    assert.equal(result.code, 2, args.join(" "));
    assert.match(result.stderr, /^portcullis: probe/);
  }
  const help = await runMain(["probe", "--help"]);
  assert.equal(help.code, 0);
  assert.match(help.stdout, /portcullis probe <http\(s\):\/\/host:port\/path>/);
});

Deno.test("cli probe: under an edge's derived flags it reaches /readyz, and nothing outside the grant", async () => {
  const [publicPort, localPort, providerPort] = freePorts(3);
  const ports = { public: publicPort, local_health: localPort, provider_health: providerPort };
  const dir = await writeConfig(proofConfig(ports));
  const flags = await derivedFlags(dir.config);
  const gateway = await Gateway.start(dir, ports);
  try {
    const ready = await runCli(flags, ["probe", `http://127.0.0.1:${localPort}/readyz`]);
    assert.equal(ready.code, 0, ready.stderr);
    const [outside] = freePorts(1);
    const denied = await runCli(flags, ["probe", `http://127.0.0.1:${outside}/readyz`]);
    assert.equal(denied.code, 1);
    assert.match(denied.stderr, /Requires net access/);
  } finally {
    await gateway.dispose();
  }
});

Deno.test("Containerfile: the HEALTHCHECK probes the example's local_health /readyz with the binary", async () => {
  const containerfile = await Deno.readTextFile(`${ROOT}deploy/container/Containerfile`);
  const binary = /COPY --from=build \/out\/portcullis (\S+)/.exec(containerfile)?.[1];
  const check = /^\s+CMD (\[.*\])$/m.exec(containerfile.split("\nHEALTHCHECK ")[1] ?? "")?.[1];
  assert.ok(binary && check, "a HEALTHCHECK in exec form");
  const [program, verb, url] = JSON.parse(check) as string[];
  assert.equal(program, binary, "the binary itself: distroless has no shell");
  assert.equal(verb, "probe");
  const config = await Deno.readTextFile(`${ROOT}deploy/example/config.yaml`);
  const local = /local_health: \{ listen: \[\{ hostname: ([\d.]+), port: (\d+) \}\] \}/.exec(
    config,
  );
  assert.ok(local, "the example's local_health listener");
  assert.equal(url, `http://${local[1]}:${local[2]}/readyz`);
});
