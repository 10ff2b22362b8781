/**
 * Node requests (src/trust/csr.ts, through `signNodeCsr`): a request is signed only when it is
 * exactly `CN=<node>`, asks for nothing more, has a key rustls accepts that is not weak, and its
 * signature verifies; each other request is refused with its reason, and nothing is recorded.
 *
 * @module
 */
import assert from "node:assert/strict";
import "reflect-metadata";
import * as x509 from "@peculiar/x509";
import { type CsrRefusal, initCa, issuedFor, loadIssuer, signNodeCsr } from "../src/trust/ca.ts";
import { makeNodeKeyAndCsr, writeSecretFile } from "../src/trust/csr.ts";

/** A request for `subject` with `keys`, as a node would not make it. */
async function requestFor(
  subject: x509.JsonName,
  options: { keys?: CryptoKeyPair; extensions?: x509.Extension[] } = {},
): Promise<string> {
  const algorithm = { name: "ECDSA", namedCurve: "P-256", hash: "SHA-256" };
  const keys = options.keys ?? await crypto.subtle.generateKey(algorithm, true, ["sign", "verify"]);
  const request = await x509.Pkcs10CertificateRequestGenerator.create({
    name: subject,
    keys,
    signingAlgorithm: keys.privateKey.algorithm.name === "ECDSA"
      ? algorithm
      : { name: keys.privateKey.algorithm.name, hash: "SHA-256" },
    extensions: options.extensions,
  }, crypto);
  return request.toString("pem");
}

async function rsaKeys(bits: number): Promise<CryptoKeyPair> {
  const algorithm = {
    name: "RSASSA-PKCS1-v1_5",
    modulusLength: bits,
    publicExponent: new Uint8Array([1, 0, 1]),
    hash: "SHA-256",
  };
  return await crypto.subtle.generateKey(algorithm, true, ["sign", "verify"]);
}

/** The request with the first occurrence of `from` in its DER replaced by `to` (same length). */
function tampered(pem: string, from: string, to: string): string {
  const der = x509.PemConverter.decodeFirst(pem);
  const bytes = new Uint8Array(der);
  const text = new TextDecoder("latin1").decode(bytes);
  const at = text.indexOf(from);
  assert.ok(at >= 0);
  bytes.set(new TextEncoder().encode(to), at);
  return x509.PemConverter.encode(bytes.buffer, "CERTIFICATE REQUEST");
}

Deno.test("signNodeCsr() refuses every request that is not exactly CN=<node> with a good key and signature", async () => {
  const dir = await Deno.makeTempDir({ prefix: "portcullis-csr-" });
  try {
    await initCa(dir, { names: ["hub.test"] });
    const issuer = await loadIssuer(dir);
    const good = (await makeNodeKeyAndCsr("edge-1")).csrPem;
    const ed = await crypto.subtle.generateKey({ name: "Ed25519" }, true, ["sign", "verify"]);
    const cases: Record<string, [string, CsrRefusal]> = {
      wrongCn: [await requestFor([{ CN: ["edge-2"] }]), "csr_subject"],
      trailingSpace: [await requestFor([{ CN: ["edge-1 "] }]), "csr_subject"],
      trailingDot: [await requestFor([{ CN: ["edge-1."] }]), "csr_subject"],
      upperCase: [await requestFor([{ CN: ["EDGE-1"] }]), "csr_subject"],
      twoCns: [await requestFor([{ CN: ["edge-1"] }, { CN: ["edge-1"] }]), "csr_subject"],
      multiValued: [await requestFor([{ CN: ["edge-1", "edge-2"] }]), "csr_subject"],
      extraO: [await requestFor([{ CN: ["edge-1"] }, { O: ["Ops"] }]), "csr_subject"],
      extraOSameRdn: [await requestFor([{ CN: ["edge-1"], O: ["Ops"] }]), "csr_subject"],
      noSubject: [await requestFor([]), "csr_subject"],
      san: [
        await requestFor([{ CN: ["edge-1"] }], {
          extensions: [new x509.SubjectAlternativeNameExtension([{ type: "dns", value: "x" }])],
        }),
        "csr_names",
      ],
      otherExtension: [
        await requestFor([{ CN: ["edge-1"] }], {
          extensions: [new x509.BasicConstraintsExtension(true)],
        }),
        "csr_names",
      ],
      rsa1024: [await requestFor([{ CN: ["edge-1"] }], { keys: await rsaKeys(1024) }), "csr_key"],
      ed25519: [await requestFor([{ CN: ["edge-1"] }], { keys: ed as CryptoKeyPair }), "csr_key"],
      tamperedSubject: [tampered(good, "edge-1", "edge-2"), "csr_signature"],
      notPem: ["hello", "csr_unparsable"],
      twoBlocks: [good + good, "csr_unparsable"],
      certificate: [issuer.intermediatePem, "csr_unparsable"],
      tooLarge: [good + " ".repeat(16 * 1024), "csr_unparsable"],
      garbage: [
        x509.PemConverter.encode(new Uint8Array(64).buffer, "CERTIFICATE REQUEST"),
        "csr_unparsable",
      ],
    };
    const reasons: Record<string, string> = {};
    for (const [name, [csrPem]] of Object.entries(cases)) {
      const result = await signNodeCsr(issuer, {
        csrPem,
        nodeId: "edge-1",
        nodeType: "edge",
        lifetimeDays: 1,
      });
      reasons[name] = result.ok ? "issued" : result.reason;
      if (!result.ok) assert.ok(result.detail.length > 0);
    }
    assert.deepEqual(
      reasons,
      Object.fromEntries(Object.entries(cases).map(([n, [, r]]) => [n, r])),
    );
    assert.deepEqual(await issuedFor(dir, "edge-1"), []);

    const rsa2048 = await requestFor([{ CN: ["edge-1"] }], { keys: await rsaKeys(2048) });
    const p384 = await crypto.subtle.generateKey({ name: "ECDSA", namedCurve: "P-384" }, true, [
      "sign",
      "verify",
    ]);
    for (const csrPem of [good, rsa2048, await requestFor([{ CN: ["edge-1"] }], { keys: p384 })]) {
      const result = await signNodeCsr(issuer, {
        csrPem,
        nodeId: "edge-1",
        nodeType: "edge",
        lifetimeDays: 1,
      });
      assert.equal(result.ok, true, result.ok ? "" : result.detail);
    }
    await assert.rejects(
      () =>
        signNodeCsr(issuer, { csrPem: good, nodeId: "../x", nodeType: "edge", lifetimeDays: 1 }),
      RangeError,
    );
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("makeNodeKeyAndCsr() and writeSecretFile(): a P-256 key and a CN-only request, written 0600 whole", async () => {
  const { keyPem, csrPem } = await makeNodeKeyAndCsr("door-3");
  const request = new x509.Pkcs10CertificateRequest(csrPem);
  assert.deepEqual(request.subjectName.toJSON(), [{ CN: ["door-3"] }]);
  assert.equal(request.attributes.length, 0);
  assert.deepEqual(request.publicKey.algorithm, { name: "ECDSA", namedCurve: "P-256" });
  assert.ok(await request.verify(crypto));
  assert.match(keyPem, /^-----BEGIN PRIVATE KEY-----\n[^-]+-----END PRIVATE KEY-----\n$/);
  await assert.rejects(() => makeNodeKeyAndCsr("door 3"), RangeError);

  const dir = await Deno.makeTempDir();
  try {
    await Deno.writeTextFile(`${dir}/node.key`, "old", { mode: 0o644 });
    await writeSecretFile(`${dir}/node.key`, keyPem);
    assert.equal(await Deno.readTextFile(`${dir}/node.key`), keyPem);
    assert.equal(Deno.statSync(`${dir}/node.key`).mode! & 0o777, 0o600);
    assert.deepEqual([...Deno.readDirSync(dir)].map((entry) => entry.name), ["node.key"]);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
