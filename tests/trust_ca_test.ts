/**
 * The fleet CA (src/trust/ca.ts): `initCa` makes a root, an intermediate and the hub's certificate
 * with keys only their owner may read, and never overwrites a CA; `loadIssuer` needs no root key;
 * `signNodeCsr` turns a request naming exactly one node into a client certificate that chains to
 * the root (as OpenSSL sees it too) and passes a real mutual-TLS handshake against `hub.crt`.
 * Refused requests are in trust_csr_test.ts.
 *
 * @module
 */
import assert from "node:assert/strict";
import https from "node:https";
import type { AddressInfo } from "node:net";
import type { TLSSocket } from "node:tls";
import "reflect-metadata";
import * as x509 from "@peculiar/x509";
import {
  caFiles,
  certificateNotAfter,
  certificateSerial,
  initCa,
  issuedFor,
  type Issuer,
  loadIssuer,
  signNodeCsr,
} from "../src/trust/ca.ts";
import { makeNodeKeyAndCsr } from "../src/trust/csr.ts";

const NOW = new Date("2030-01-15T12:00:00Z");

/** A CA in a fresh temp folder, made for `hub.test` and 127.0.0.1. */
async function freshCa(options: { now?: Date } = {}): Promise<{ dir: string; issuer: Issuer }> {
  const parent = await Deno.makeTempDir({ prefix: "portcullis-ca-" });
  const dir = `${parent}/ca`;
  await initCa(dir, { names: ["hub.test", "127.0.0.1"], now: options.now });
  return { dir, issuer: await loadIssuer(dir) };
}

function modeOf(path: string): number {
  return (Deno.statSync(path).mode ?? 0) & 0o777;
}

function certificatesOf(pem: string): x509.X509Certificate[] {
  return pem.match(/-----BEGIN CERTIFICATE-----[^-]+-----END CERTIFICATE-----/g)!
    .map((block) => new x509.X509Certificate(block));
}

Deno.test("initCa() makes root, intermediate and hub certificates that chain, keys 0600, folders 0700", async () => {
  const { dir, issuer } = await freshCa({ now: NOW });
  try {
    const files = caFiles(dir);
    for (const key of [files.rootKey, files.intermediateKey, files.hubKey]) {
      assert.equal(modeOf(key), 0o600, key);
    }
    for (
      const folder of [
        files.dir,
        files.issuedDir,
        files.secretsDir,
        files.nodesDir,
        files.revokedDir,
      ]
    ) {
      assert.equal(modeOf(folder), 0o700, folder);
    }
    const [root] = certificatesOf(await Deno.readTextFile(files.rootCert));
    const [middle] = certificatesOf(await Deno.readTextFile(files.intermediateCert));
    const hubChain = certificatesOf(await Deno.readTextFile(files.hubCert));
    assert.equal(hubChain.length, 2);
    assert.equal(hubChain[1].serialNumber, middle.serialNumber);
    assert.equal(root.subject, "CN=fleet root");
    assert.equal(hubChain[0].subject, "CN=hub.test");

    const rootBasic = root.getExtension(x509.BasicConstraintsExtension)!;
    const middleBasic = middle.getExtension(x509.BasicConstraintsExtension)!;
    const hubBasic = hubChain[0].getExtension(x509.BasicConstraintsExtension)!;
    assert.deepEqual([rootBasic.ca, rootBasic.critical, rootBasic.pathLength], [
      true,
      true,
      undefined,
    ]);
    assert.deepEqual([middleBasic.ca, middleBasic.critical, middleBasic.pathLength], [
      true,
      true,
      0,
    ]);
    assert.deepEqual([hubBasic.ca, hubBasic.critical], [false, true]);
    const caUsage = x509.KeyUsageFlags.keyCertSign | x509.KeyUsageFlags.cRLSign;
    for (const cert of [root, middle]) {
      const usage = cert.getExtension(x509.KeyUsagesExtension)!;
      assert.deepEqual([usage.usages, usage.critical], [caUsage, true]);
    }
    const san = hubChain[0].getExtension(x509.SubjectAlternativeNameExtension)!;
    assert.deepEqual(san.names.toJSON(), [
      { type: "dns", value: "hub.test" },
      { type: "ip", value: "127.0.0.1" },
    ]);
    const eku = hubChain[0].getExtension(x509.ExtendedKeyUsageExtension)!;
    assert.deepEqual([...eku.usages], [x509.ExtendedKeyUsage.serverAuth]);
    assert.equal(root.notAfter.getTime(), NOW.getTime() + 3650 * 86_400_000);
    assert.equal(middle.notAfter.getTime(), NOW.getTime() + 1825 * 86_400_000);
    assert.equal(hubChain[0].notAfter.getTime(), NOW.getTime() + 365 * 86_400_000);

    const chain = await new x509.X509ChainBuilder({ certificates: [root, middle] })
      .build(hubChain[0], crypto);
    assert.deepEqual([...chain].map((cert) => cert.subject), [
      "CN=hub.test",
      "CN=fleet intermediate",
      "CN=fleet root",
    ]);
    assert.ok(await root.verify({ signatureOnly: true }, crypto));
    assert.ok(await middle.verify({ publicKey: root.publicKey, signatureOnly: true }, crypto));
    assert.ok(
      await hubChain[0].verify({ publicKey: middle.publicKey, signatureOnly: true }, crypto),
    );
    assert.match(certificateSerial(issuer.rootPem), /^(?!00)[0-7][0-9a-f]{31}$/);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("initCa() refuses a folder that already holds a CA, naming the file, and changes nothing", async () => {
  const { dir } = await freshCa();
  try {
    const files = caFiles(dir);
    const before = await Deno.readTextFile(files.intermediateKey);
    await assert.rejects(
      () => initCa(dir, { names: ["hub.test"] }),
      (error: Error) => error.message.includes(`"${files.rootCert}" already exists`),
    );
    assert.equal(await Deno.readTextFile(files.intermediateKey), before);

    const other = await Deno.makeTempDir();
    await Deno.writeTextFile(`${other}/intermediate.key`, "not mine", { mode: 0o600 });
    await assert.rejects(
      () => initCa(other, { names: ["hub.test"] }),
      (error: Error) => error.message.includes(`"${other}/intermediate.key" already exists`),
    );
    assert.equal(await Deno.readTextFile(`${other}/intermediate.key`), "not mine");
    await assert.rejects(() => initCa(`${other}/x`, { names: [] }), RangeError);
    await assert.rejects(() => initCa(`${other}/y`, { names: ["a b"] }), RangeError);
    await Deno.remove(other, { recursive: true });
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("initCa() names its CA certificates by the operator's label; by default they name no product", async () => {
  const dir = await Deno.makeTempDir();
  try {
    const labelled = await initCa(`${dir}/a`, { names: ["hub.test"], label: "ops 7" });
    const [root] = certificatesOf(await Deno.readTextFile(labelled.rootCert));
    const [middle] = certificatesOf(await Deno.readTextFile(labelled.intermediateCert));
    assert.deepEqual([root.subject, middle.subject], ["CN=ops 7 root", "CN=ops 7 intermediate"]);
    const plain = await initCa(`${dir}/b`, { names: ["hub.test"] });
    for (const file of [plain.rootCert, plain.intermediateCert, plain.hubCert]) {
      for (const cert of certificatesOf(await Deno.readTextFile(file))) {
        assert.doesNotMatch(`${cert.subject} ${cert.issuer}`, /portcullis/i, file);
      }
    }
    for (const label of ["", "a,CN=x", "x".repeat(49), "é"]) {
      await assert.rejects(() => initCa(`${dir}/c`, { names: ["hub.test"], label }), RangeError);
    }
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("loadIssuer() works once root.key is moved away, and refuses an exposed or foreign key by name", async () => {
  const { dir } = await freshCa();
  try {
    const files = caFiles(dir);
    await Deno.remove(files.rootKey);
    const issuer = await loadIssuer(dir);
    const { csrPem } = await makeNodeKeyAndCsr("edge-1");
    const signed = await signNodeCsr(issuer, {
      csrPem,
      nodeId: "edge-1",
      nodeType: "edge",
      lifetimeDays: 30,
    });
    assert.equal(signed.ok, true);

    await Deno.chmod(files.intermediateKey, 0o640);
    await assert.rejects(
      () => loadIssuer(dir),
      (error: Error) =>
        error.message.includes(files.intermediateKey) && error.message.includes("0640"),
    );
    await Deno.chmod(files.intermediateKey, 0o600);
    await Deno.remove(files.intermediateKey);
    await Deno.copyFile(files.hubKey, files.intermediateKey);
    await assert.rejects(
      () => loadIssuer(dir),
      (error: Error) =>
        error.message ===
          `Intermediate key "${files.intermediateKey}" is not the key of its certificate`,
    );
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("signNodeCsr() issues a client certificate naming only the node, chained to the root, recorded 0600", async () => {
  const { dir, issuer } = await freshCa();
  try {
    const { csrPem } = await makeNodeKeyAndCsr("edge-1");
    const now = new Date();
    const result = await signNodeCsr(issuer, {
      csrPem,
      nodeId: "edge-1",
      nodeType: "door",
      lifetimeDays: 30,
      now,
    });
    assert.ok(result.ok);
    const [leaf, middle, ...rest] = certificatesOf(result.chainPem);
    assert.equal(rest.length, 0);
    assert.deepEqual(leaf.subjectName.toJSON(), [{ CN: ["edge-1"] }]);
    assert.equal(result.serial, leaf.serialNumber.toLowerCase());
    assert.equal(result.serial, certificateSerial(result.chainPem));
    assert.equal(certificateNotAfter(result.chainPem).getTime(), result.notAfter.getTime());
    const seconds = (date: Date) => Math.floor(date.getTime() / 1000);
    assert.equal(seconds(leaf.notBefore), seconds(now) - 300);
    assert.equal(seconds(leaf.notAfter), seconds(now) + 30 * 86_400);
    const basic = leaf.getExtension(x509.BasicConstraintsExtension)!;
    assert.deepEqual([basic.ca, basic.critical], [false, true]);
    const usage = leaf.getExtension(x509.KeyUsagesExtension)!;
    assert.deepEqual([usage.usages, usage.critical], [x509.KeyUsageFlags.digitalSignature, true]);
    assert.deepEqual([...leaf.getExtension(x509.ExtendedKeyUsageExtension)!.usages], [
      x509.ExtendedKeyUsage.clientAuth,
    ]);
    const aki = leaf.getExtension(x509.AuthorityKeyIdentifierExtension)!;
    assert.equal(aki.keyId, middle.getExtension(x509.SubjectKeyIdentifierExtension)!.keyId);
    assert.ok(leaf.getExtension(x509.SubjectKeyIdentifierExtension));
    assert.equal(leaf.getExtension(x509.SubjectAlternativeNameExtension), null);

    const root = new x509.X509Certificate(issuer.rootPem);
    const chain = await new x509.X509ChainBuilder({ certificates: [root, middle] })
      .build(leaf, crypto);
    assert.equal(chain.length, 3);
    assert.ok(await leaf.verify({ publicKey: middle.publicKey, signatureOnly: true }, crypto));

    const files = caFiles(dir);
    await Deno.writeTextFile(`${dir}/leaf.pem`, result.chainPem);
    assert.equal(
      await opensslVerify(["-purpose", "sslclient", "-untrusted", files.intermediateCert], dir),
      `${dir}/leaf.pem: OK`,
    );
    assert.equal(
      await opensslVerify(["-purpose", "sslserver", "-untrusted", files.intermediateCert], dir),
      `${dir}/leaf.pem: FAILED`,
    );

    const record = `${files.issuedDir}/edge-1/${result.serial}.json`;
    assert.equal(modeOf(record), 0o600);
    const json = JSON.parse(await Deno.readTextFile(record));
    assert.deepEqual(Object.keys(json).sort(), [
      "incarnation",
      "issued_at",
      "node_id",
      "node_type",
      "not_after",
      "not_before",
      "serial",
    ]);
    assert.deepEqual([json.serial, json.node_id, json.node_type], [
      result.serial,
      "edge-1",
      "door",
    ]);
    assert.deepEqual(await issuedFor(dir, "edge-1"), [{
      serial: result.serial,
      nodeId: "edge-1",
      nodeType: "door",
      incarnation: 1,
      notAfter: result.notAfter.toISOString(),
      issuedAt: json.issued_at,
    }]);
    assert.deepEqual(await issuedFor(dir, "edge-2"), []);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

/** `openssl verify -x509_strict -CAfile root.crt <args> <dir>/leaf.pem`: its first line. */
async function opensslVerify(args: string[], dir: string): Promise<string> {
  const command = new Deno.Command("openssl", {
    args: ["verify", "-x509_strict", "-CAfile", caFiles(dir).rootCert, ...args, `${dir}/leaf.pem`],
    stdout: "piped",
    stderr: "piped",
  });
  const output = await command.output();
  const text = new TextDecoder().decode(output.stdout) + new TextDecoder().decode(output.stderr);
  return text.includes(": OK") ? text.trim() : `${dir}/leaf.pem: FAILED`;
}

/** What a handshake looked like from the server: authorized, and the client certificate's subject. */
interface Seen {
  readonly authorized: boolean;
  readonly subject?: x509.JsonName;
}

/** Fetches `https://127.0.0.1:<port>/` from a node:https server holding `hub.crt` and `hub.key`. */
async function handshake(dir: string, client: Deno.HttpClient): Promise<Seen> {
  const files = caFiles(dir);
  const seen: Seen[] = [];
  const server = https.createServer({
    cert: await Deno.readTextFile(files.hubCert),
    key: await Deno.readTextFile(files.hubKey),
    ca: await Deno.readTextFile(files.rootCert),
    requestCert: true,
    rejectUnauthorized: false,
  }, function answer(request, response) {
    const socket = request.socket as TLSSocket;
    const raw = socket.getPeerCertificate()?.raw;
    const subject = raw?.length ? new x509.X509Certificate(Uint8Array.from(raw)) : undefined;
    seen.push({ authorized: socket.authorized, subject: subject?.subjectName.toJSON() });
    response.end("ok");
  });
  await new Promise<void>((listening) => server.listen(0, "127.0.0.1", listening));
  try {
    const port = (server.address() as AddressInfo).port;
    const response = await fetch(`https://127.0.0.1:${port}/`, { client });
    assert.equal(await response.text(), "ok");
    return seen[0];
  } finally {
    client.close();
    await new Promise((closed) => server.close(closed));
  }
}

Deno.test("mutual TLS: a node's issued chain is authorized by a server holding hub.crt; none, or another CA's, is not", async () => {
  const { dir, issuer } = await freshCa();
  try {
    const { keyPem, csrPem } = await makeNodeKeyAndCsr("edge-7");
    const result = await signNodeCsr(issuer, {
      csrPem,
      nodeId: "edge-7",
      nodeType: "edge",
      lifetimeDays: 1,
    });
    assert.ok(result.ok);
    const withCert = Deno.createHttpClient({
      caCerts: [issuer.rootPem],
      cert: result.chainPem,
      key: keyPem,
    });
    assert.deepEqual(await handshake(dir, withCert), {
      authorized: true,
      subject: [{ CN: ["edge-7"] }],
    });
    const without = Deno.createHttpClient({ caCerts: [issuer.rootPem] });
    assert.deepEqual(await handshake(dir, without), { authorized: false, subject: undefined });

    const other = await freshCa();
    const foreign = await signNodeCsr(other.issuer, {
      csrPem,
      nodeId: "edge-7",
      nodeType: "edge",
      lifetimeDays: 1,
    });
    assert.ok(foreign.ok);
    const withForeign = Deno.createHttpClient({
      caCerts: [issuer.rootPem],
      cert: foreign.chainPem,
      key: keyPem,
    });
    assert.deepEqual(await handshake(dir, withForeign), {
      authorized: false,
      subject: [{ CN: ["edge-7"] }],
    });
    await Deno.remove(other.dir, { recursive: true });
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
