/**
 * The fleet CRL (src/trust/crl.ts): what `writeCrl` and `revokeNode` list, `readRevoked` reads back
 * — only from a CRL the intermediate signed — and OpenSSL agrees a listed certificate is revoked.
 * Serials are spelt one way by `certificateSerial`, the issued index and the CRL, whatever their
 * first byte.
 *
 * @module
 */
import assert from "node:assert/strict";
import "reflect-metadata";
import * as x509 from "@peculiar/x509";
import {
  caFiles,
  certificateSerial,
  initCa,
  type Issuer,
  loadIssuer,
  signNodeCsr,
} from "../src/trust/ca.ts";
import { readRevoked, revokeNode, writeCrl } from "../src/trust/crl.ts";
import { makeNodeKeyAndCsr } from "../src/trust/csr.ts";
import { normaliseSerial } from "../src/trust/pem.ts";

async function freshCa(): Promise<{ dir: string; issuer: Issuer; dispose(): Promise<void> }> {
  const parent = await Deno.makeTempDir({ prefix: "portcullis-crl-" });
  const dir = `${parent}/ca`;
  await initCa(dir, { names: ["hub.test"] });
  const dispose = () => Deno.remove(parent, { recursive: true });
  return { dir, issuer: await loadIssuer(dir), dispose };
}

/** Issues `nodeId` a certificate; its chain and serial. */
async function issue(
  issuer: Issuer,
  nodeId: string,
): Promise<{ chainPem: string; serial: string }> {
  const { csrPem } = await makeNodeKeyAndCsr(nodeId);
  const result = await signNodeCsr(issuer, { csrPem, nodeId, nodeType: "edge", lifetimeDays: 7 });
  assert.ok(result.ok);
  return result;
}

/** OpenSSL's verdict on `chainPem` against the CA's root, intermediate and CRL. */
async function opensslCrlCheck(dir: string, chainPem: string): Promise<string> {
  const files = caFiles(dir);
  const leaf = `${dir}/leaf-${crypto.randomUUID()}.pem`;
  await Deno.writeTextFile(leaf, chainPem);
  const output = await new Deno.Command("openssl", {
    args: [
      "verify",
      "-x509_strict",
      "-crl_check",
      "-CAfile",
      files.rootCert,
      "-untrusted",
      files.intermediateCert,
      "-CRLfile",
      files.crl,
      leaf,
    ],
    stdout: "piped",
    stderr: "piped",
  }).output();
  const text = new TextDecoder().decode(output.stdout) + new TextDecoder().decode(output.stderr);
  if (text.includes(": OK")) return "ok";
  return text.includes("certificate revoked") ? "revoked" : text;
}

Deno.test("writeCrl() and readRevoked() round-trip two revocations, and OpenSSL sees them revoked", async () => {
  const { dir, issuer, dispose } = await freshCa();
  try {
    const one = await issue(issuer, "edge-1");
    const two = await issue(issuer, "edge-2");
    const kept = await issue(issuer, "edge-3");
    const empty = await readRevoked(issuer.files.crl, issuer.intermediatePem);
    assert.equal(empty.serials.size, 0);
    assert.equal(await opensslCrlCheck(dir, one.chainPem), "ok");

    const now = new Date("2031-03-04T05:06:07Z");
    await writeCrl(issuer, [
      { serial: one.serial.toUpperCase(), at: now, reason: "keyCompromise" },
      { serial: two.serial, at: now },
    ], { now: new Date() });
    const read = await readRevoked(issuer.files.crl, issuer.intermediatePem);
    assert.deepEqual([...read.serials].sort(), [one.serial, two.serial].sort());
    assert.equal(Deno.statSync(issuer.files.crl).mode! & 0o777, 0o644);
    assert.deepEqual(
      [
        await opensslCrlCheck(dir, one.chainPem),
        await opensslCrlCheck(dir, two.chainPem),
        await opensslCrlCheck(dir, kept.chainPem),
      ],
      ["revoked", "revoked", "ok"],
    );
    await assert.rejects(
      () => writeCrl(issuer, [{ serial: "ab", at: now, reason: "x" }]),
      RangeError,
    );
    await assert.rejects(() => writeCrl(issuer, [{ serial: "xyz", at: now }]), RangeError);
  } finally {
    await dispose();
  }
});

Deno.test("readRevoked() refuses a CRL another CA signed, a tampered one, a truncated one, naming the file", async () => {
  const mine = await freshCa();
  const other = await freshCa();
  try {
    const path = other.issuer.files.crl;
    await assert.rejects(
      () => readRevoked(path, mine.issuer.intermediatePem),
      (error: Error) => error.message.startsWith(`CRL "${path}" is not signed by intermediate`),
    );

    const own = mine.issuer.files.crl;
    const der = new Uint8Array(x509.PemConverter.decodeFirst(await Deno.readTextFile(own)));
    const crl = new x509.X509Crl(der);
    const at = der.length - crl.signature.byteLength + 8;
    der[at] ^= 0x01; // inside the signature
    await Deno.writeTextFile(own, x509.PemConverter.encode(der.buffer, "X509 CRL"));
    await assert.rejects(
      () => readRevoked(own, mine.issuer.intermediatePem),
      (error: Error) => error.message.startsWith(`CRL "${own}" is not signed by intermediate`),
    );

    const text = await Deno.readTextFile(path);
    await Deno.writeTextFile(path, text.slice(0, text.length / 2));
    await assert.rejects(
      () => readRevoked(path, other.issuer.intermediatePem),
      (error: Error) => error.message.startsWith(`CRL "${path}" does not parse`),
    );
    const lines = text.split("\n");
    await Deno.writeTextFile(path, [...lines.slice(0, 3), ...lines.slice(-3)].join("\n"));
    await assert.rejects(
      () => readRevoked(path, other.issuer.intermediatePem),
      (error: Error) => error.message.startsWith(`CRL "${path}" does not parse`),
    );
    await Deno.remove(path);
    await assert.rejects(
      () => readRevoked(path, other.issuer.intermediatePem),
      (error: Error) => error.message === `CRL ${path} does not exist`,
    );
  } finally {
    await mine.dispose();
    await other.dispose();
  }
});

Deno.test("revokeNode() lists each certificate of the node once, keeping earlier entries with their dates", async () => {
  const { dir, issuer, dispose } = await freshCa();
  try {
    const first = [await issue(issuer, "edge-1"), await issue(issuer, "edge-1")];
    const other = await issue(issuer, "edge-2");
    const before = Date.now();
    assert.deepEqual(await revokeNode(dir, "edge-2"), { serials: [other.serial], incarnation: 1 });
    const earlier = new x509.X509Crl(await Deno.readTextFile(issuer.files.crl)).entries[0];

    const revoked = await revokeNode(dir, "edge-1", "keyCompromise");
    assert.deepEqual(revoked.serials.sort(), first.map((issued) => issued.serial).sort());
    const read = await readRevoked(issuer.files.crl, issuer.intermediatePem);
    assert.deepEqual(
      [...read.serials].sort(),
      [other, ...first].map((issued) => certificateSerial(issued.chainPem)).sort(),
    );
    assert.ok(read.thisUpdate.getTime() >= Math.floor(before / 1000) * 1000);
    const entries = new x509.X509Crl(await Deno.readTextFile(issuer.files.crl)).entries;
    const kept = entries.find((entry) => normaliseSerial(entry.serialNumber) === other.serial)!;
    assert.equal(kept.revocationDate.getTime(), earlier.revocationDate.getTime());
    assert.equal(kept.reason, undefined);
    assert.deepEqual(
      entries.filter((entry) => entry !== kept).map((entry) => entry.reason),
      [x509.X509CrlReason.keyCompromise, x509.X509CrlReason.keyCompromise],
    );

    assert.deepEqual(await revokeNode(dir, "edge-1"), { serials: [], incarnation: 1 });
    assert.equal(new x509.X509Crl(await Deno.readTextFile(issuer.files.crl)).entries.length, 3);
    await assert.rejects(
      () => revokeNode(dir, "edge-9"),
      (error: Error) => error.message.startsWith(`Node "edge-9" has no certificate recorded`),
    );
    await assert.rejects(() => revokeNode(dir, "edge-1", "because"), RangeError);
  } finally {
    await dispose();
  }
});

Deno.test("certificateSerial() and the CRL spell serials alike, whatever the first byte or padding", async () => {
  const { issuer, dispose } = await freshCa();
  try {
    const hexes: string[] = [];
    for (let i = 0; i < 48; i++) {
      const bytes = crypto.getRandomValues(new Uint8Array(1 + (i % 20)));
      if (i % 4 === 0) bytes[0] = i % 16; // small first byte (0x00 makes a leading zero byte)
      if (i % 4 === 1) bytes[0] |= 0x80; // DER pads it with 0x00
      if (bytes.every((b) => b === 0)) bytes[bytes.length - 1] = 1;
      const hex = Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
      hexes.push(i % 3 === 0 ? `00${hex}`.toUpperCase() : hex);
    }
    const spelt: string[] = [];
    for (const hex of hexes) {
      const cert = await x509.X509CertificateGenerator.create({
        serialNumber: hex,
        subject: "CN=serial",
        issuer: issuer.cert.subjectName,
        notBefore: new Date(),
        notAfter: new Date(Date.now() + 86_400_000),
        publicKey: issuer.cert.publicKey,
        signingKey: issuer.key,
        signingAlgorithm: { name: "ECDSA", hash: "SHA-256" },
      }, crypto);
      const serial = certificateSerial(cert.toString("pem"));
      assert.equal(serial, cert.serialNumber.toLowerCase(), hex);
      assert.equal(serial, normaliseSerial(hex), hex);
      assert.equal(serial, certificateSerial(new Uint8Array(cert.rawData)));
      spelt.push(serial);
    }
    await writeCrl(issuer, hexes.map((serial) => ({ serial, at: new Date() })));
    const read = await readRevoked(issuer.files.crl, issuer.intermediatePem);
    assert.deepEqual([...read.serials].sort(), [...new Set(spelt)].sort());
  } finally {
    await dispose();
  }
});
