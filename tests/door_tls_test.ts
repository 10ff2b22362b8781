/**
 * A door over TLS both ways: it follows an https hub with its client certificate (mutual TLS, the
 * hub reading the node from the certificate's CN), and serves its public listener with its own
 * certificate — never a tenant's.
 *
 * @module
 */
import assert from "node:assert/strict";
import https from "node:https";
import type { AddressInfo } from "node:net";
import type { TLSSocket } from "node:tls";
import { stringify } from "yaml";
import { parseYaml } from "../src/config/yaml_file.ts";
import { loadDoorConfig } from "../src/door/config.ts";
import { startDoor } from "../src/door/door.ts";
import { failureReply } from "../src/request/errors.ts";
import { writeReply } from "../src/request/write_reply.ts";
import { TestPki, TlsClient } from "./fixtures/certs.ts";
import { freePorts } from "./fixtures/gateway.ts";
import { doorStatus, eventually, SAYS, startDoorHub } from "./fixtures/door.ts";

Deno.test("door: follows an https hub by client certificate and serves TLS with its own", async () => {
  const pki = await TestPki.create();
  const hubCert = await pki.issue("hub.test", { altNames: ["127.0.0.1"] });
  const client = await pki.issue("door-tls");
  const own = await pki.issue("door.test");
  await Deno.writeTextFile(`${pki.dir}/ca.crt`, pki.ca.certPem);
  const hub = await startDoorHub({
    mirrors: [{ host: "tls-mirror.example", region: "DE" }],
    slugs: [{ slug: "tls-slug-0001", strategy: "first" }],
  });
  hub.client.set("tls-mirror.example", SAYS.live);
  await hub.service.probeNow();
  const seen: string[] = [];
  const server = https.createServer({
    cert: hubCert.certPem,
    key: hubCert.keyPem,
    ca: [pki.ca.certPem],
    requestCert: true,
    rejectUnauthorized: true,
  }, (request, response) => {
    const url = new URL(request.url ?? "/", "https://hub");
    const cn = (request.socket as TLSSocket).getPeerCertificate().subject?.CN;
    seen.push(String(cn));
    if (cn !== url.searchParams.get("node_id")) {
      return writeReply(response, failureReply("wrong_node", "t"), "t");
    }
    hub.service.answer(url, response).then((reply) => reply && writeReply(response, reply, "t"));
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const [port, healthPort] = freePorts(2);
  const text = stringify({
    role: "door",
    node_id: "door-tls",
    listen: [{
      hostname: "127.0.0.1",
      port,
      tls: { cert_file: own.certFile, key_file: own.keyFile },
    }],
    cover_file: "cover.html",
    health: { listen: [{ hostname: "127.0.0.1", port: healthPort }] },
    hub: {
      url: `https://127.0.0.1:${(server.address() as AddressInfo).port}`,
      ca_file: "ca.crt",
      cert_file: client.certFile,
      key_file: client.keyFile,
    },
    cache_dir: "cache",
  });
  await Deno.writeTextFile(`${pki.dir}/cover.html`, "cover");
  const source = parseYaml(`${pki.dir}/door.yaml`, text);
  if (Array.isArray(source)) throw new Error(JSON.stringify(source));
  const door = await startDoor(loadDoorConfig(source), { log: () => {} });
  let tls: TlsClient | undefined;
  try {
    await eventually(
      "the view over mutual TLS",
      async () => (await doorStatus(healthPort)).view.hash === hub.service.feed.live.hash,
    );
    assert.equal((await doorStatus(healthPort)).stream.auth, "mutual TLS");
    assert.ok(seen.every((cn) => cn === "door-tls"));
    tls = await TlsClient.open(port, { servername: "door.test", ca: [pki.ca.certPem] });
    assert.equal(tls.served.subject, "door.test");
    const hit = await tls.request({ path: "/tls-slug-0001" });
    assert.equal(hit.status, 302);
    assert.equal(hit.headers.location, "https://tls-mirror.example/");
    const cover = await tls.request({ path: "/" });
    assert.equal(cover.body, "cover");
  } finally {
    await tls?.close();
    await door.close();
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
    await hub.dispose();
    await Deno.remove(pki.dir, { recursive: true });
  }
});
