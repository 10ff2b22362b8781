/**
 * Kills operator-mutation survivors in src/trust/: each test names the rule it guards. In process
 * and fast (these run for every mutant of those modules): one CA made per test that needs one, PEM
 * and records written by hand where a rule is about what the CA reads.
 *
 * @module
 */
import assert from "node:assert/strict";
import "reflect-metadata";
import * as x509 from "@peculiar/x509";
import { initCa, issuedFor, type Issuer, loadIssuer, signNodeCsr } from "../src/trust/ca.ts";
import { keepLastGoodCrl, readRevoked, revokeNode, writeCrl } from "../src/trust/crl.ts";
import { csrForKey, judgeNodeCsr, makeNodeKeyAndCsr, writeSecretFile } from "../src/trust/csr.ts";
import { flatRecords, readRecord, recordedFor, recordOf } from "../src/trust/issued_index.ts";
import { migrateFlatIssued } from "../src/trust/migrate_issued.ts";
import { judgeNodeChain } from "../src/trust/node_chain.ts";
import {
  isRevokedBy,
  readAll,
  readNodeEntry,
  readRevokedMarker,
  writeNodeEntry,
  writeRevokedMarker,
} from "../src/trust/node_registry.ts";
import { addNodeSecret, NodeSecrets, readNodeSecretFile } from "../src/trust/node_secrets.ts";
import {
  certificateNotAfter,
  certificateSerial,
  normaliseSerial,
  pemBlocks,
  pemOf,
  randomSerial,
  toPem,
  writeFileAtomic,
} from "../src/trust/pem.ts";
import { certify, newKeys, privateKeyPem, signingFor, signingKeyOf } from "../src/trust/signing.ts";
import { recordFields } from "../src/trust/record_fields.ts";
import { parseSpent, sha256Hex, type SpentSecret, writeSpent } from "../src/trust/spent_secrets.ts";

const DAY_MS = 86_400_000;

/** A temp folder, removed by `dispose`. */
async function tempDir() {
  const dir = await Deno.makeTempDir({ prefix: "portcullis-kills-trust-" });
  return { dir, dispose: () => Deno.remove(dir, { recursive: true }) };
}

function modeOf(path: string): number {
  return (Deno.statSync(path).mode ?? 0) & 0o777;
}

/** A CA in a fresh folder (made at `now`), and its issuer. */
async function freshCa(now?: Date): Promise<{ issuer: Issuer; dispose(): Promise<void> }> {
  const { dir, dispose } = await tempDir();
  await initCa(`${dir}/ca`, { names: ["hub.test"], now });
  return { issuer: await loadIssuer(`${dir}/ca`), dispose };
}

// ---------------------------------------------------------------------------------------------
// pem.ts

Deno.test("pem: labels with digits and spaces, base64 with + and /, CRLF lines all read", () => {
  const der = new Uint8Array([0xfb, 0xff, 0xbf, 0x01, 0x02, 0x03]); // base64 "+/+/AQID"
  const crlf = toPem(der, "X509 CRL").replaceAll("\n", "\r\n");
  assert.match(crlf, /\+\/\+\/AQID/);
  assert.deepEqual(pemBlocks(crlf).map((block) => [block.label, [...block.der]]), [
    ["X509 CRL", [...der]],
  ]);
  assert.deepEqual([...pemOf(toPem(der, "PRIVATE KEY"), "PRIVATE KEY")[0]], [...der]);
});

Deno.test("pem: a block that is not base64 is named by its label and number, from 1", () => {
  const bad = "-----BEGIN CERTIFICATE-----\nA\n-----END CERTIFICATE-----\n";
  assert.throws(() => pemBlocks(bad), { message: 'PEM block "CERTIFICATE" 1 is not base64' });
});

Deno.test("pem: pemOf wants its label only, one block unless told some, and at least one", () => {
  const cert = toPem(new Uint8Array([1, 2, 3]), "CERTIFICATE");
  const key = toPem(new Uint8Array([4, 5, 6]), "PRIVATE KEY");
  assert.equal(pemOf(cert, "CERTIFICATE").length, 1);
  assert.throws(() => pemOf("no pem here", "CERTIFICATE"), {
    message: 'No PEM "CERTIFICATE" block found',
  });
  assert.throws(() => pemOf(cert + key, "CERTIFICATE", "some"), {
    message: 'A PEM "PRIVATE KEY" block where only "CERTIFICATE" belongs',
  });
  assert.throws(() => pemOf(cert + cert, "CERTIFICATE"), {
    message: '2 PEM "CERTIFICATE" blocks where one belongs',
  });
  assert.equal(pemOf(cert + cert, "CERTIFICATE", "some").length, 2);
});

Deno.test("pem: serials are lowercase hex of whole bytes, any case in, nothing else", () => {
  assert.equal(normaliseSerial("00FF01"), "ff01");
  assert.equal(normaliseSerial("00ff01"), "ff01");
  assert.equal(normaliseSerial("f01"), "0f01");
  assert.equal(normaliseSerial("0000"), "00");
  for (const bad of ["7g", "g7", "", "7a 1b"]) {
    assert.throws(() => normaliseSerial(bad), TypeError, bad);
  }
});

Deno.test("pem: a fresh serial is 16 bytes, its first 0x01-0x7f, odd or even", () => {
  const firstBytes = new Set<number>();
  for (let i = 0; i < 1000; i++) {
    const serial = randomSerial();
    assert.match(serial, /^[0-7][0-9a-f]{31}$/);
    assert.notEqual(serial.slice(0, 2), "00");
    firstBytes.add(parseInt(serial.slice(0, 2), 16));
  }
  assert.ok([...firstBytes].some((byte) => byte % 2 === 1), "an odd first byte in 1000");
});

Deno.test("pem: a body may carry spaces and tabs; the first certificate of a chain is the one read", async () => {
  const der = new Uint8Array([1, 2, 3, 4, 5, 6]);
  const spaced = "-----BEGIN CERTIFICATE-----\n AQID \n\tBAUG\t\n-----END CERTIFICATE-----\n";
  assert.deepEqual([...pemOf(spaced, "CERTIFICATE")[0]], [...der]);
  assert.equal(normaliseSerial("7a00"), "7a00");
  assert.equal(normaliseSerial("007a0000"), "7a0000");
  const { issuer, dispose } = await freshCa();
  try {
    const { csrPem } = await makeNodeKeyAndCsr("edge-1");
    const signed = await signNodeCsr(issuer, {
      csrPem,
      nodeId: "edge-1",
      nodeType: "edge",
      lifetimeDays: 1,
    });
    assert.ok(signed.ok);
    assert.equal(certificateSerial(signed.chainPem), signed.serial);
    assert.equal(certificateNotAfter(signed.chainPem).getTime(), signed.notAfter.getTime());
    assert.notEqual(certificateSerial(issuer.intermediatePem), signed.serial);
  } finally {
    await dispose();
  }
});

Deno.test("pem: files are written through a private temporary file that is closed and never left behind", async () => {
  const { dir, dispose } = await tempDir();
  const realChmod = Deno.chmod;
  try {
    // What this process holds open, as `ls -l` shows it (reading /proc needs more than
    // --allow-read).
    const openFiles = async () => {
      const ls = new Deno.Command("ls", { args: ["-l", `/proc/${Deno.pid}/fd`], stdout: "piped" });
      return new TextDecoder().decode((await ls.output()).stdout);
    };
    const modes: number[] = [];
    Deno.chmod = async (path: string | URL, mode: number) => {
      modes.push(Deno.statSync(path).mode! & 0o777);
      return await realChmod(path, mode);
    };
    // Many at once in one folder: each has a temporary name of its own.
    await Promise.all(
      Array.from(
        { length: 20 },
        (_, i) =>
          writeFileAtomic(`${dir}/public-${i}.pem`, `text ${i}\n`, {
            mode: 0o644,
            replace: i % 2 === 0,
          }),
      ),
    );
    Deno.chmod = realChmod;
    assert.deepEqual(modes, Array(20).fill(0o600), "the temporary file is 0600 while written");
    assert.deepEqual(
      [...Deno.readDirSync(dir)].map((entry) => entry.name).sort(),
      Array.from({ length: 20 }, (_, i) => `public-${i}.pem`).sort(),
    );
    for (let i = 0; i < 20; i++) {
      assert.equal(await Deno.readTextFile(`${dir}/public-${i}.pem`), `text ${i}\n`);
      assert.equal(modeOf(`${dir}/public-${i}.pem`), 0o644);
    }
    const held = (await openFiles()).split("\n").filter((line) => line.includes(dir));
    assert.deepEqual(held, [], "no file of the folder is left open");
  } finally {
    Deno.chmod = realChmod;
    await dispose();
  }
});

// ---------------------------------------------------------------------------------------------
// ca.ts

Deno.test("ca: a label of letters, digits, spaces, dots, dashes, underscores names the CA; others are refused", async () => {
  const { dir, dispose } = await tempDir();
  try {
    await initCa(`${dir}/a`, { names: ["hub.test"], label: "Ops_1.a b-c" });
    const root = new x509.X509Certificate(await Deno.readTextFile(`${dir}/a/root.crt`));
    assert.equal(root.subject, "CN=Ops_1.a b-c root");
    await initCa(`${dir}/b`, { names: ["hub.test"], label: "ops" });
    for (const label of ["", "-ops", "ops/1", "a".repeat(49)]) {
      await assert.rejects(
        () => initCa(`${dir}/c`, { names: ["hub.test"], label }),
        RangeError,
        label,
      );
    }
    await assert.rejects(
      () => initCa(`${dir}/d`, { names: [] }),
      { name: "RangeError", message: "A CA needs at least one name for the hub" },
    );
    await assert.rejects(
      () => initCa(`${dir}/e`, { names: ["hub.test"], intermediateDays: 0 }),
      { name: "RangeError", message: "Lifetime 0 is not a positive number of days" },
    );
    // One name is enough.
    const hub = new x509.X509Certificate(
      pemOf(await Deno.readTextFile(`${dir}/b/hub.crt`), "CERTIFICATE", "some")[0],
    );
    assert.equal(hub.subject, "CN=hub.test");
  } finally {
    await dispose();
  }
});

Deno.test("ca: loadIssuer reads CA files up to 64 KiB and refuses an intermediate that is no CA", async () => {
  const { dir, dispose } = await tempDir();
  try {
    const files = await initCa(`${dir}/ca`, { names: ["hub.test"] });
    const rootPem = await Deno.readTextFile(files.rootCert);
    await Deno.writeTextFile(files.rootCert, rootPem + "\n".repeat(64 * 1024 - rootPem.length));
    await loadIssuer(files.dir);
    await Deno.writeTextFile(files.rootCert, rootPem + "\n".repeat(64 * 1024 + 1 - rootPem.length));
    await assert.rejects(() => loadIssuer(files.dir), /65537 bytes, more than 65536/);
    await Deno.writeTextFile(files.rootCert, rootPem);

    // An "intermediate" the root signed without CA:true, with its key.
    const root = new x509.X509Certificate(rootPem);
    const rootKey = await signingKeyOf(await Deno.readTextFile(files.rootKey), root, "root");
    const keys = await newKeys();
    const leaf = await certify({
      subject: "not a ca",
      publicKey: keys.publicKey,
      signingKey: rootKey,
      issuer: root,
      extensions: [new x509.BasicConstraintsExtension(false, undefined, true)],
      usage: x509.KeyUsageFlags.digitalSignature,
      notBefore: new Date(Date.now() - 60_000),
      notAfter: new Date(Date.now() + DAY_MS),
    });
    await Deno.writeTextFile(files.intermediateCert, toPem(leaf.rawData, "CERTIFICATE"));
    await Deno.writeTextFile(files.intermediateKey, await privateKeyPem(keys.privateKey), {
      mode: 0o600,
    });
    await assert.rejects(
      () => loadIssuer(files.dir),
      { message: `Intermediate certificate "${files.intermediateCert}" is not a CA certificate` },
    );
  } finally {
    await dispose();
  }
});

Deno.test("signing: an issuer needs a subject key identifier; a key must be its certificate's", async () => {
  const keys = await newKeys();
  const bare = await x509.X509CertificateGenerator.createSelfSigned({
    serialNumber: "7a",
    name: "CN=bare",
    notBefore: new Date(Date.now() - 60_000),
    notAfter: new Date(Date.now() + DAY_MS),
    signingAlgorithm: { name: "ECDSA", hash: "SHA-256" },
    keys,
  }, crypto);
  await assert.rejects(
    () =>
      certify({
        subject: "edge-1",
        publicKey: keys.publicKey,
        signingKey: keys.privateKey,
        issuer: bare,
        extensions: [],
        usage: x509.KeyUsageFlags.digitalSignature,
        notBefore: new Date(),
        notAfter: new Date(Date.now() + DAY_MS),
      }),
    { name: "TypeError", message: 'Certificate "CN=bare" has no subject key identifier' },
  );
  const other = await privateKeyPem((await newKeys()).privateKey);
  await assert.rejects(() => signingKeyOf(other, bare, "Key k"), {
    message: "Key k is not the key of its certificate",
  });
  await signingKeyOf(await privateKeyPem(keys.privateKey), bare, "Key k");
});

Deno.test("signing: an ECDSA key signs with SHA-256, a P-384 key with SHA-384", async () => {
  const p256 = await newKeys();
  const p384 = await crypto.subtle.generateKey({ name: "ECDSA", namedCurve: "P-384" }, false, [
    "sign",
    "verify",
  ]);
  assert.deepEqual(signingFor(p256.privateKey), { name: "ECDSA", hash: "SHA-256" });
  assert.deepEqual(signingFor(p384.privateKey), { name: "ECDSA", hash: "SHA-384" });
});

// ---------------------------------------------------------------------------------------------
// csr.ts

Deno.test("csr: node ids of a digit, upper and lower case are ids; longer or other characters are not", async () => {
  for (const id of ["7seas", "eDGE-A.b_9"]) {
    const { csrPem } = await makeNodeKeyAndCsr(id);
    assert.equal((await judgeNodeCsr(csrPem, id)).ok, true, id);
  }
  for (const id of ["edge!x", "e".repeat(64), "-edge", ""]) {
    await assert.rejects(() => makeNodeKeyAndCsr(id), RangeError, id);
  }
});

Deno.test("csr: a request for a key the node holds names only a node id", async () => {
  const { keyPem } = await makeNodeKeyAndCsr("edge-1");
  const csrPem = await csrForKey("edge-1", keyPem);
  assert.equal((await judgeNodeCsr(csrPem, "edge-1")).ok, true);
  for (const id of ["edge!x", "-edge", "e".repeat(64)]) {
    await assert.rejects(() => csrForKey(id, keyPem), {
      name: "RangeError",
      message: `Node id "${id}" is not a node id`,
    });
  }
});

Deno.test("csr: a request of exactly 16384 bytes is judged, one byte more is not", async () => {
  const { csrPem } = await makeNodeKeyAndCsr("edge-1");
  const at = csrPem + "\n".repeat(16 * 1024 - csrPem.length);
  assert.equal(at.length, 16384);
  assert.equal((await judgeNodeCsr(at, "edge-1")).ok, true);
  const over = await judgeNodeCsr(at + "\n", "edge-1");
  assert.deepEqual(over, {
    ok: false,
    reason: "csr_unparsable",
    detail: "Request is more than 16384 bytes",
  });
});

Deno.test("csr: a request signed with SHA-384 or SHA-512 is judged; SHA-1 is not", async () => {
  const keys = await crypto.subtle.generateKey({ name: "ECDSA", namedCurve: "P-256" }, true, [
    "sign",
    "verify",
  ]);
  const request = async (hash: string) =>
    (await x509.Pkcs10CertificateRequestGenerator.create({
      name: [{ CN: ["edge-1"] }],
      keys,
      signingAlgorithm: { name: "ECDSA", hash },
    }, crypto)).toString("pem");
  for (const hash of ["SHA-256", "SHA-384", "SHA-512"]) {
    const judged = await judgeNodeCsr(await request(hash), "edge-1");
    assert.equal(judged.ok, true, `${hash}: ${judged.ok ? "" : judged.detail}`);
  }
  const sha1 = await judgeNodeCsr(await request("SHA-1"), "edge-1");
  assert.equal(sha1.ok ? "ok" : sha1.reason, "csr_signature");
});

Deno.test("csr: a key, secret or certificate is written 0600", async () => {
  const { dir, dispose } = await tempDir();
  try {
    await writeSecretFile(`${dir}/node.key`, "secret\n");
    assert.equal(modeOf(`${dir}/node.key`), 0o600);
    assert.equal(await Deno.readTextFile(`${dir}/node.key`), "secret\n");
  } finally {
    await dispose();
  }
});

// ---------------------------------------------------------------------------------------------
// crl.ts and signing.ts's CRLs

/** The CRL on disk, parsed. */
async function crlOf(issuer: Issuer): Promise<x509.X509Crl> {
  return new x509.X509Crl(pemOf(await Deno.readTextFile(issuer.files.crl), "X509 CRL")[0]);
}

/** The CRL's cRLNumber, as a signed integer. */
function crlNumber(crl: x509.X509Crl): bigint {
  const der = new Uint8Array(crl.getExtension("2.5.29.20")!.value);
  assert.equal(der[0], 0x02);
  const bytes = der.subarray(2, 2 + der[1]);
  let value = 0n;
  for (const byte of bytes) value = value * 256n + BigInt(byte);
  if (bytes.length > 0 && bytes[0] >= 0x80) value -= 1n << BigInt(8 * bytes.length);
  return value;
}

Deno.test("crl: it is written 0644, for 7 days unless told, numbered by its time; any positive days", async () => {
  const { issuer, dispose } = await freshCa();
  try {
    const now = new Date("2030-01-15T12:00:00Z");
    await writeCrl(issuer, [{ serial: "7A1B", at: now }], { now });
    assert.equal(modeOf(issuer.files.crl), 0o644);
    let crl = await crlOf(issuer);
    assert.equal(crl.nextUpdate!.getTime() - crl.thisUpdate.getTime(), 7 * DAY_MS);
    assert.equal(crlNumber(crl), BigInt(now.getTime()));
    assert.deepEqual(crl.entries.map((entry) => [entry.serialNumber, entry.reason]), [[
      "7a1b",
      undefined,
    ]]);
    await writeCrl(issuer, [], { now, nextUpdateDays: 1 });
    crl = await crlOf(issuer);
    assert.equal(crl.nextUpdate!.getTime() - now.getTime(), DAY_MS);
    for (const days of [0, -1, Number.NaN, Infinity]) {
      await assert.rejects(
        () => writeCrl(issuer, [], { now, nextUpdateDays: days }),
        RangeError,
        `${days}`,
      );
    }
    // The number is a minimal, positive DER INTEGER whatever its bytes: 0, one byte, a first
    // byte of 0x80.
    const cases: [number, number[]][] = [
      [0, [0x02, 0x01, 0x00]],
      [5, [0x02, 0x01, 0x05]],
      [0x7f * 2 ** 32, [0x02, 0x05, 0x7f, 0x00, 0x00, 0x00, 0x00]],
      [0x80 * 2 ** 32, [0x02, 0x06, 0x00, 0x80, 0x00, 0x00, 0x00, 0x00]],
    ];
    for (const [ms, der] of cases) {
      await writeCrl(issuer, [], { now: new Date(ms) });
      const written = await crlOf(issuer);
      assert.deepEqual([...new Uint8Array(written.getExtension("2.5.29.20")!.value)], der, `${ms}`);
      assert.equal(crlNumber(written), BigInt(ms));
    }
  } finally {
    await dispose();
  }
});

Deno.test("crl: a CRL of 8 MiB is read, one byte more is refused by name", async () => {
  const { issuer, dispose } = await freshCa();
  try {
    await writeCrl(issuer, [{ serial: "7a1b", at: new Date() }]);
    const text = await Deno.readTextFile(issuer.files.crl);
    const limit = 8 * 1024 * 1024;
    await Deno.writeTextFile(issuer.files.crl, text + "\n".repeat(limit - text.length));
    assert.deepEqual([...(await readRevoked(issuer.files.crl, issuer.intermediatePem)).serials], [
      "7a1b",
    ]);
    await Deno.writeTextFile(issuer.files.crl, text + "\n".repeat(limit + 1 - text.length));
    await assert.rejects(
      () => readRevoked(issuer.files.crl, issuer.intermediatePem),
      /CRL .*more than 8388608/,
    );
  } finally {
    await dispose();
  }
});

Deno.test("crl: the hub's last good copy is written whole, 0644, its folder made 0700", async () => {
  const { dir, dispose } = await tempDir();
  try {
    await keepLastGoodCrl(`${dir}/hub-state/crl.last-good.pem`, "a crl\n");
    assert.equal(await Deno.readTextFile(`${dir}/hub-state/crl.last-good.pem`), "a crl\n");
    assert.equal(modeOf(`${dir}/hub-state/crl.last-good.pem`), 0o644);
    assert.equal(modeOf(`${dir}/hub-state`), 0o700);
  } finally {
    await dispose();
  }
});

Deno.test("crl: revoking a node nobody knows is refused by name; a revocation without a reason lists it", async () => {
  const { issuer, dispose } = await freshCa();
  try {
    const dir = issuer.files.dir;
    await assert.rejects(
      () => revokeNode(dir, "edge-9"),
      {
        message:
          `Node "edge-9" has no certificate recorded in "${issuer.files.issuedDir}", no record in "${issuer.files.nodesDir}" and no registration secret waiting`,
      },
    );
    const { csrPem } = await makeNodeKeyAndCsr("edge-1");
    const signed = await signNodeCsr(issuer, {
      csrPem,
      nodeId: "edge-1",
      nodeType: "edge",
      lifetimeDays: 1,
    });
    assert.ok(signed.ok);
    await addNodeSecret(issuer.files.secretsDir, "edge-2", "edge", 3);
    const revoked = await revokeNode(dir, "edge-1");
    assert.deepEqual(revoked, { serials: [signed.serial], incarnation: 1 });
    const crl = await crlOf(issuer);
    assert.deepEqual(crl.entries.map((entry) => [entry.serialNumber, entry.reason]), [[
      signed.serial,
      undefined,
    ]]);
    // A node with only a waiting secret: revoked in the secret's incarnation, the secret removed.
    assert.deepEqual(await revokeNode(dir, "edge-2", "keyCompromise"), {
      serials: [],
      incarnation: 3,
    });
    assert.equal((await readRevokedMarker(issuer.files.revokedDir, "edge-2"))?.incarnation, 3);
    await assert.rejects(
      () => Deno.stat(`${issuer.files.secretsDir}/edge-2.secret`),
      Deno.errors.NotFound,
    );
  } finally {
    await dispose();
  }
});

// ---------------------------------------------------------------------------------------------
// issued_index.ts

/** A record as issued_index.ts writes one. */
function recordJson(serial: string, nodeId: string, fields: Record<string, unknown> = {}): string {
  return JSON.stringify({
    serial,
    node_id: nodeId,
    node_type: "edge",
    incarnation: 1,
    not_before: "2030-01-01T00:00:00.000Z",
    not_after: "2030-02-01T00:00:00.000Z",
    issued_at: "2030-01-01T00:05:00.000Z",
    ...fields,
  });
}

Deno.test("issued index: a node's folder lists its records only; a stray file is no record", async () => {
  const { dir, dispose } = await tempDir();
  try {
    await Deno.mkdir(`${dir}/edge-1`, { recursive: true });
    await Deno.writeTextFile(`${dir}/edge-1/7a.json`, recordJson("7a", "edge-1"));
    await Deno.writeTextFile(`${dir}/edge-1/notes.txt`, "operator notes\n");
    await Deno.mkdir(`${dir}/edge-1/7b.json`);
    const found = await recordedFor(dir, "edge-1");
    assert.deepEqual(found.map((record) => record.serial), ["7a"]);
    assert.equal(await recordOf(dir, "edge-1", "7f"), undefined);
    assert.equal(await recordOf(dir, "edge-2", "7f"), undefined);
    assert.equal((await recordOf(dir, "edge-1", "7A"))?.serial, "7a");
    assert.deepEqual(await recordedFor(dir, "edge-2"), []);
  } finally {
    await dispose();
  }
});

Deno.test("issued index: a record naming another serial, no date, or another node is an error naming it", async () => {
  const { dir, dispose } = await tempDir();
  try {
    await Deno.writeTextFile(`${dir}/7a.json`, recordJson("7b", "edge-1"));
    await assert.rejects(() => readRecord(dir, "7a.json", "edge-1"), {
      message: `Issued record "${dir}/7a.json" names serial "7b", not its file's`,
    });
    await Deno.writeTextFile(`${dir}/7a.json`, recordJson("x7a", "edge-1"));
    await assert.rejects(() => readRecord(dir, "7a.json", "edge-1"), {
      message: `Issued record "${dir}/7a.json" names serial "x7a", not its file's`,
    });
    await Deno.writeTextFile(`${dir}/7a.json`, recordJson("7a", "edge-1", { not_after: "soon" }));
    await assert.rejects(() => readRecord(dir, "7a.json", "edge-1"), {
      message: `Issued record "${dir}/7a.json" has field "not_after" "soon", not a date`,
    });
    await Deno.writeTextFile(`${dir}/7a.json`, recordJson("7a", "edge-2"));
    await assert.rejects(
      () => readRecord(dir, "7a.json", "edge-1"),
      /names node "edge-2", not its folder's/,
    );
    // The flat layout's records are any node's.
    assert.equal((await readRecord(dir, "7a.json", undefined)).nodeId, "edge-2");
  } finally {
    await dispose();
  }
});

Deno.test("issued index: the flat layout is records directly in issued/, none when it does not exist", async () => {
  const { dir, dispose } = await tempDir();
  try {
    assert.deepEqual(await flatRecords(`${dir}/missing`), []);
    await Deno.mkdir(`${dir}/edge-1`);
    await Deno.writeTextFile(`${dir}/notes.txt`, "operator notes\n");
    assert.deepEqual(await flatRecords(dir), []);
    await Deno.writeTextFile(`${dir}/7a.json`, recordJson("7a", "edge-1"));
    assert.deepEqual(await flatRecords(dir), ["7a.json"]);
  } finally {
    await dispose();
  }
});

// ---------------------------------------------------------------------------------------------
// migrate_issued.ts

Deno.test("migrate-ca: each node gets its type, incarnation 1 and first issue; a fully listed node is revoked", async () => {
  const { issuer, dispose } = await freshCa();
  try {
    const files = issuer.files;
    const flat = (serial: string, nodeId: string, fields: Record<string, unknown> = {}) =>
      Deno.writeTextFile(`${files.issuedDir}/${serial}.json`, recordJson(serial, nodeId, fields));
    await flat("7a01", "edge-1", { issued_at: "2030-01-02T00:00:00.000Z" });
    await flat("7a02", "edge-1", { issued_at: "2030-01-01T00:00:00.000Z" });
    await flat("7b01", "door-1", { node_type: "door" });
    await flat("7c01", "gone-1");
    await flat("7d01", "mixed-1");
    await flat("7d02", "mixed-1", { node_type: "door" });
    // Re-provisioned as an edge: its one live record decides, not the listed door's.
    await flat("7e01", "again-1", { node_type: "door" });
    await flat("7e02", "again-1");
    // A node with a record already keeps it.
    await flat("7f01", "kept-1");
    const kept = {
      nodeId: "kept-1",
      nodeType: "door" as const,
      incarnation: 2,
      registeredAt: "2030-01-03T00:00:00.000Z",
    };
    await writeNodeEntry(files.nodesDir, kept);
    const at = new Date();
    await writeCrl(issuer, [{ serial: "7a01", at }, { serial: "7c01", at }, {
      serial: "7e01",
      at,
    }]);
    const result = await migrateFlatIssued(files.dir);
    assert.equal(result.moved, 9);
    const byNode = Object.fromEntries(result.nodes.map((node) => [node.nodeId, node]));
    assert.deepEqual(byNode["edge-1"], {
      nodeId: "edge-1",
      nodeType: "edge",
      revoked: false,
      kept: false,
    });
    assert.deepEqual(byNode["door-1"], {
      nodeId: "door-1",
      nodeType: "door",
      revoked: false,
      kept: false,
    });
    assert.deepEqual(byNode["gone-1"], {
      nodeId: "gone-1",
      nodeType: "edge",
      revoked: true,
      kept: false,
    });
    assert.deepEqual(byNode["again-1"], {
      nodeId: "again-1",
      nodeType: "edge",
      revoked: false,
      kept: false,
    });
    assert.deepEqual(byNode["kept-1"], { nodeId: "kept-1", revoked: false, kept: true });
    assert.deepEqual(await readNodeEntry(files.nodesDir, "kept-1"), kept);
    assert.deepEqual(byNode["mixed-1"], {
      nodeId: "mixed-1",
      nodeType: undefined,
      revoked: false,
      kept: false,
    });
    assert.deepEqual(await readNodeEntry(files.nodesDir, "edge-1"), {
      nodeId: "edge-1",
      nodeType: "edge",
      incarnation: 1,
      registeredAt: "2030-01-01T00:00:00.000Z",
    });
    assert.equal((await readNodeEntry(files.nodesDir, "gone-1"))?.nodeType, "edge");
    assert.equal(await readNodeEntry(files.nodesDir, "mixed-1"), undefined);
    assert.equal((await readRevokedMarker(files.revokedDir, "gone-1"))?.incarnation, 1);
    assert.equal(await readRevokedMarker(files.revokedDir, "edge-1"), undefined);
    assert.equal(modeOf(`${files.issuedDir}/edge-1`), 0o700);
    assert.deepEqual((await issuedFor(files.dir, "edge-1")).map((record) => record.serial), [
      "7a01",
      "7a02",
    ]);
    // Done: a second run moves nothing, even with the CRL damaged since.
    await Deno.writeTextFile(files.crl, "damaged\n");
    assert.deepEqual(await migrateFlatIssued(files.dir), { moved: 0, nodes: [] });
  } finally {
    await dispose();
  }
});

// ---------------------------------------------------------------------------------------------
// node_chain.ts

Deno.test("node chain: valid from its first second to its last, for its own node only", async () => {
  const t0 = new Date("2030-01-15T12:00:00Z");
  const { issuer, dispose } = await freshCa(t0);
  try {
    const { csrPem } = await makeNodeKeyAndCsr("edge-1");
    const signed = await signNodeCsr(issuer, {
      csrPem,
      nodeId: "edge-1",
      nodeType: "edge",
      lifetimeDays: 2,
      now: new Date(t0.getTime() + DAY_MS),
    });
    assert.ok(signed.ok);
    const from = t0.getTime() + DAY_MS - 5 * 60_000;
    const until = t0.getTime() + 3 * DAY_MS;
    const judge = (nodeId: string, now: number) =>
      judgeNodeChain(signed.chainPem, { nodeId, rootsPem: issuer.rootPem, now: new Date(now) });
    for (const now of [from, until]) {
      const chain = judge("edge-1", now);
      assert.ok(!("refused" in chain), JSON.stringify(chain));
      assert.deepEqual([chain.notBefore.getTime(), chain.notAfter.getTime()], [from, until]);
    }
    for (const now of [from - 1000, until + 1000]) assert.ok("refused" in judge("edge-1", now));
    const other = judge("edge-2", from);
    assert.deepEqual(other, { refused: 'it names "CN=edge-1", not "CN=edge-2"' });
    // Another fleet CA (same names), or this chain with its intermediate's signature broken.
    const { issuer: stranger, dispose: disposeStranger } = await freshCa(t0);
    try {
      const foreign = judgeNodeChain(signed.chainPem, {
        nodeId: "edge-1",
        rootsPem: stranger.rootPem,
        now: new Date(from),
      });
      assert.deepEqual(foreign, {
        refused: '"CN=fleet intermediate" is not signed by the fleet CA\'s chain',
      });
    } finally {
      await disposeStranger();
    }
    const [leafDer, middleDer] = pemOf(signed.chainPem, "CERTIFICATE", "some");
    const broken = Uint8Array.from(middleDer);
    broken[broken.length - 1] ^= 0x01;
    const tampered = toPem(leafDer, "CERTIFICATE") + toPem(broken, "CERTIFICATE");
    const judged = judgeNodeChain(tampered, {
      nodeId: "edge-1",
      rootsPem: issuer.rootPem,
      now: new Date(from),
    });
    assert.deepEqual(judged, {
      refused: '"CN=fleet intermediate" is not signed by the fleet CA\'s chain',
    });
  } finally {
    await dispose();
  }
});

// ---------------------------------------------------------------------------------------------
// node_registry.ts

Deno.test("node registry: records 0600 in folders made 0700; missing is none; what is not an object is said", async () => {
  const { dir, dispose } = await tempDir();
  try {
    const at = "2030-01-01T00:00:00.000Z";
    assert.equal(await readNodeEntry(`${dir}/nodes`, "edge-1"), undefined, "no folder");
    assert.equal(await readRevokedMarker(`${dir}/revoked`, "edge-1"), undefined, "no folder");
    assert.deepEqual(await readAll(`${dir}/nodes`, readNodeEntry), new Map());
    await writeNodeEntry(`${dir}/nodes`, {
      nodeId: "edge-1",
      nodeType: "edge",
      incarnation: 1,
      registeredAt: at,
    });
    await writeRevokedMarker(`${dir}/revoked`, { nodeId: "edge-1", incarnation: 1, revokedAt: at });
    assert.equal(modeOf(`${dir}/nodes/edge-1.json`), 0o600);
    assert.equal(modeOf(`${dir}/revoked/edge-1.json`), 0o600);
    assert.equal(modeOf(`${dir}/nodes`), 0o700);
    assert.equal(modeOf(`${dir}/revoked`), 0o700);
    assert.equal(await readNodeEntry(`${dir}/nodes`, "edge-2"), undefined, "no file");
    await Deno.writeTextFile(`${dir}/nodes/notes.txt`, "operator notes\n");
    const all = await readAll(`${dir}/nodes`, readNodeEntry);
    assert.deepEqual([...all.keys()], ["edge-1"]);
    assert.equal((await readRevokedMarker(`${dir}/revoked`, "edge-1"))?.revokedAt, at);
    for (const text of ['"x"', "[]", "null", "{"]) {
      await Deno.writeTextFile(`${dir}/nodes/edge-3.json`, text);
      await assert.rejects(() => readNodeEntry(`${dir}/nodes`, "edge-3"), {
        message: `Record "${dir}/nodes/edge-3.json" is not a JSON object`,
      });
    }
  } finally {
    await dispose();
  }
});

Deno.test("node registry: a record is read strictly, each wrong field named; up to 4096 bytes", async () => {
  const { dir, dispose } = await tempDir();
  try {
    const file = `${dir}/edge-1.json`;
    const good = {
      node_id: "edge-1",
      node_type: "edge",
      incarnation: 2,
      registered_at: "2030-01-01T00:00:00.000Z",
    };
    const write = (json: unknown, pad = 0) =>
      Deno.writeTextFile(file, JSON.stringify(json) + " ".repeat(pad));
    const text = JSON.stringify(good);
    await write(good, 4096 - text.length);
    assert.equal((await readNodeEntry(dir, "edge-1"))?.incarnation, 2);
    await write(good, 4097 - text.length);
    await assert.rejects(
      () => readNodeEntry(dir, "edge-1"),
      new RegExp(`Cannot read "${file}": .*4097 bytes`),
    );
    const wrong: [string, unknown, string][] = [
      ["node_type", "router", `Record "${file}" has field "node_type" "router", not edge/door`],
      ["node_id", "edge-2", `Record "${file}" names node "edge-2", not its file's`],
      ["incarnation", 0, `Record "${file}" has field "incarnation" 0, not 1 or more`],
      ["incarnation", 1.5, `Record "${file}" has field "incarnation" 1.5, not 1 or more`],
      ["incarnation", "2", `Record "${file}" has field "incarnation" "2", not 1 or more`],
      ["registered_at", 5, `Record "${file}" has field "registered_at" 5, not a date`],
      ["registered_at", "soon", `Record "${file}" has field "registered_at" "soon", not a date`],
    ];
    for (const [field, value, message] of wrong) {
      await write({ ...good, [field]: value });
      await assert.rejects(() => readNodeEntry(dir, "edge-1"), { message }, `${field} ${value}`);
    }
    await assert.rejects(() => readNodeEntry(dir, "../edge-1"), RangeError);
    // A marker keeps its reason (a string), and has none when it gave none.
    const revokedAt = "2030-01-02T00:00:00.000Z";
    await writeRevokedMarker(dir, {
      nodeId: "edge-r",
      incarnation: 1,
      revokedAt,
      reason: "keyCompromise",
    });
    assert.equal((await readRevokedMarker(dir, "edge-r"))?.reason, "keyCompromise");
    await writeRevokedMarker(dir, { nodeId: "edge-s", incarnation: 1, revokedAt });
    assert.ok(!("reason" in (await readRevokedMarker(dir, "edge-s"))!));
    await Deno.writeTextFile(
      `${dir}/edge-t.json`,
      JSON.stringify({ node_id: "edge-t", incarnation: 1, revoked_at: revokedAt, reason: 7 }),
    );
    assert.ok(!("reason" in (await readRevokedMarker(dir, "edge-t"))!));
  } finally {
    await dispose();
  }
});

Deno.test("node registry: a marker revokes its incarnation and earlier ones; no marker revokes nothing", () => {
  const entry = (incarnation: number) => ({
    nodeId: "e",
    nodeType: "edge" as const,
    incarnation,
    registeredAt: "",
  });
  const marker = (incarnation: number) => ({ nodeId: "e", incarnation, revokedAt: "" });
  assert.equal(isRevokedBy(entry(1), undefined), false);
  assert.equal(isRevokedBy(undefined, undefined), false);
  assert.equal(isRevokedBy(undefined, marker(1)), true);
  assert.equal(isRevokedBy(entry(2), marker(2)), true);
  assert.equal(isRevokedBy(entry(3), marker(2)), false);
});

// ---------------------------------------------------------------------------------------------
// node_secrets.ts and spent_secrets.ts

/** A spent record for `nodeId` made from `secret`, until `until`. */
async function spentFor(nodeId: string, secret: string, until: Date): Promise<SpentSecret> {
  return {
    nodeId,
    nodeType: "edge",
    incarnation: 1,
    secretSha256: await sha256Hex(secret),
    keySha256: "ab".repeat(32),
    serial: "7a1b",
    certificate: "-----BEGIN CERTIFICATE-----\nAQID\n-----END CERTIFICATE-----\n",
    until: until.toISOString(),
  };
}

Deno.test("node secrets: incarnations are whole numbers from 1; a secret file of 4096 bytes reads", async () => {
  const { dir, dispose } = await tempDir();
  try {
    for (const bad of [0, -1, 1.5]) {
      await assert.rejects(() => addNodeSecret(dir, "edge-1", "edge", bad), RangeError, `${bad}`);
    }
    const made = await addNodeSecret(dir, "edge-1", "edge");
    await assert.rejects(() => addNodeSecret(dir, "edge-1", "edge"), {
      message: `File "${made.file}" holds a secret for node "edge-1" not used yet`,
    });
    const text = await Deno.readTextFile(made.file);
    assert.ok((await readNodeSecretFile(made.file)).createdAt instanceof Date);
    const json = JSON.parse(text);
    await Deno.writeTextFile(made.file, JSON.stringify({ ...json, created_at: "never" }));
    assert.ok(!("createdAt" in await readNodeSecretFile(made.file)));
    await Deno.writeTextFile(made.file, text + " ".repeat(4096 - text.length));
    assert.equal((await readNodeSecretFile(made.file)).incarnation, 1);
    await Deno.writeTextFile(made.file, text + " ".repeat(4097 - text.length));
    await assert.rejects(() => readNodeSecretFile(made.file), /4097 bytes/);
  } finally {
    await dispose();
  }
});

Deno.test("node secrets: a used secret within its window returns its record; past it, nothing, and it goes", async () => {
  const { dir, dispose } = await tempDir();
  try {
    const secret = "s".repeat(43);
    await writeSpent(dir, await spentFor("edge-1", secret, new Date(Date.now() + 60_000)));
    assert.equal(modeOf(`${dir}/edge-1.spent`), 0o600);
    const secrets = new NodeSecrets(dir);
    const again = await secrets.consume("edge-1", secret);
    assert.equal(again.ok, false);
    assert.equal(again.ok ? "" : again.spent?.serial, "7a1b");
    assert.deepEqual(await secrets.consume("edge-1", "t".repeat(43)), { ok: false });
    assert.deepEqual(await secrets.consume("edge-2", secret), { ok: false });
    await writeSpent(dir, await spentFor("edge-2", secret, new Date(Date.now() - 1000)));
    assert.deepEqual(await secrets.consume("edge-2", secret), { ok: false });
    assert.deepEqual([...Deno.readDirSync(dir)].map((entry) => entry.name), ["edge-1.spent"]);
  } finally {
    await dispose();
  }
});

Deno.test("node secrets: files are read strictly; a spent record in its window only, naming its node", async () => {
  const { dir, dispose } = await tempDir();
  const realNow = Date.now;
  try {
    await assert.rejects(() => addNodeSecret(dir, "edge-1", "router" as "edge"), RangeError);
    const made = await addNodeSecret(dir, "edge-1", "edge");
    const json = JSON.parse(await Deno.readTextFile(made.file));
    const { incarnation: _, ...old } = json;
    await Deno.writeTextFile(made.file, JSON.stringify(old));
    assert.equal(
      (await readNodeSecretFile(made.file)).incarnation,
      1,
      "a file without one is the first",
    );
    for (
      const [field, value] of [["node_type", "Xedge"], ["node_type", "edge!"], [
        "secret",
        ` ${"s".repeat(20)}`,
      ], ["secret", `${"s".repeat(20)} `]]
    ) {
      await Deno.writeTextFile(made.file, JSON.stringify({ ...json, [field]: value }));
      await assert.rejects(
        () => readNodeSecretFile(made.file),
        new RegExp(`no valid field "${field}"`),
        `${field} ${value}`,
      );
    }
    await Deno.remove(made.file);
    // Spent records: in the window, of their own node, readable, up to 64 KiB.
    const secret = "s".repeat(43);
    const lines: string[] = [];
    const secrets = new NodeSecrets(dir, { log: (line) => lines.push(line) });
    const until = Date.now() + 60_000;
    const spent = await spentFor("edge-1", secret, new Date(until));
    await writeSpent(dir, spent);
    const text = await Deno.readTextFile(`${dir}/edge-1.spent`);
    await Deno.writeTextFile(`${dir}/edge-1.spent`, text + " ".repeat(64 * 1024 - text.length));
    const found = await secrets.consume("edge-1", secret);
    assert.equal(found.ok ? "" : found.spent?.serial, "7a1b", "64 KiB reads");
    await Deno.writeTextFile(`${dir}/edge-1.spent`, text + " ".repeat(64 * 1024 + 1 - text.length));
    assert.deepEqual(await secrets.consume("edge-1", secret), { ok: false });
    assert.ok(
      lines.some((line) => /edge-1\.spent.*node "edge-1" cannot register again/.test(line)),
      lines.join("\n"),
    );
    await writeSpent(dir, spent);
    await Deno.chmod(`${dir}/edge-1.spent`, 0o644);
    assert.deepEqual(await secrets.consume("edge-1", secret), { ok: false }, "others may read it");
    await Deno.chmod(`${dir}/edge-1.spent`, 0o600);
    await Deno.rename(`${dir}/edge-1.spent`, `${dir}/edge-2.spent`);
    assert.deepEqual(
      await secrets.consume("edge-2", secret),
      { ok: false },
      "it names another node",
    );
    assert.ok(
      lines.some((line) => line.includes('File "edge-2.spent" names node "edge-1"')),
      lines.join("\n"),
    );
    await Deno.rename(`${dir}/edge-2.spent`, `${dir}/edge-1.spent`);
    Date.now = () => until; // its window has ended at exactly `until`
    assert.deepEqual(await secrets.consume("edge-1", secret), { ok: false });
    Date.now = realNow;
    await assert.rejects(() => Deno.stat(`${dir}/edge-1.spent`), Deno.errors.NotFound);
    // A secret file naming another node registers nobody.
    const other = await addNodeSecret(dir, "edge-3", "edge");
    await Deno.writeTextFile(
      other.file,
      JSON.stringify({ ...json, node_id: "edge-4", secret: other.secret }),
    );
    assert.deepEqual(await secrets.consume("edge-3", other.secret), { ok: false });
    assert.ok(
      lines.some((line) => line.includes('File "edge-3.secret" names node "edge-4"')),
      lines.join("\n"),
    );
  } finally {
    Date.now = realNow;
    await dispose();
  }
});

Deno.test("node secrets: door secrets register doors; a secret of another type registers nobody, said", async () => {
  const { dir, dispose } = await tempDir();
  try {
    const door = await addNodeSecret(dir, "door-1", "door");
    const odd = await addNodeSecret(dir, "edge-9", "edge");
    const json = JSON.parse(await Deno.readTextFile(odd.file));
    await Deno.writeTextFile(odd.file, JSON.stringify({ ...json, node_type: "router" }));
    const lines: string[] = [];
    const secrets = new NodeSecrets(dir, { log: (line) => lines.push(line) });
    assert.deepEqual(await secrets.consume("door-1", door.secret), {
      ok: true,
      nodeType: "door",
      incarnation: 1,
    });
    assert.deepEqual(await secrets.consume("edge-9", odd.secret), { ok: false });
    assert.ok(lines.some((line) => line.includes('names node type "router"')), lines.join("\n"));
    // A secret group or others may read: refused, said once; one gone mid-read: nothing said.
    const open = await addNodeSecret(dir, "edge-open", "edge");
    await Deno.chmod(open.file, 0o640);
    await Deno.symlink(`${dir}/gone`, `${dir}/edge-gone.secret`);
    assert.deepEqual(await secrets.consume("edge-open", open.secret), { ok: false });
    assert.deepEqual(await secrets.consume("edge-open", open.secret), { ok: false });
    assert.equal(
      lines.filter((line) => line.includes("edge-open.secret")).length,
      1,
      lines.join("\n"),
    );
    assert.ok(!lines.some((line) => line.includes("edge-gone")), lines.join("\n"));
  } finally {
    await dispose();
  }
});

Deno.test("node secrets: a secret replaced just before it is claimed is put back for its own node", async () => {
  const { dir, dispose } = await tempDir();
  const realRename = Deno.rename;
  try {
    const first = await addNodeSecret(dir, "edge-1", "edge");
    const text = await Deno.readTextFile(first.file);
    const replaced = "r".repeat(43);
    let done = false;
    // The operator issues a new secret between the hub's read and its claim.
    Deno.rename = async (from: string | URL, to: string | URL) => {
      if (!done && String(from) === first.file) {
        done = true;
        await Deno.writeTextFile(`${dir}/new.tmp`, text.replace(first.secret, replaced), {
          mode: 0o600,
        });
        await realRename(`${dir}/new.tmp`, first.file);
      }
      return await realRename(from, to);
    };
    const secrets = new NodeSecrets(dir);
    assert.deepEqual(await secrets.consume("edge-1", first.secret), { ok: false });
    Deno.rename = realRename;
    assert.deepEqual(await secrets.consume("edge-1", replaced), {
      ok: true,
      nodeType: "edge",
      incarnation: 1,
    });
  } finally {
    Deno.rename = realRename;
    await dispose();
  }
});

Deno.test("spent secrets: SHA-256 of text and bytes, as 64 lowercase hex digits", async () => {
  const abc = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
  assert.equal(await sha256Hex("abc"), abc);
  assert.equal(await sha256Hex(new TextEncoder().encode("abc")), abc);
});

Deno.test("spent secrets: a record's fields are read strictly, each named when wrong", async () => {
  const good = await spentFor("edge-1", "s".repeat(43), new Date("2030-01-15T12:00:00Z"));
  const json = {
    node_id: good.nodeId,
    node_type: good.nodeType,
    incarnation: good.incarnation,
    secret_sha256: good.secretSha256,
    key_sha256: good.keySha256,
    serial: "7a1b0c",
    certificate: good.certificate,
    until: "2030-01-15T12:00:00.000+00:00",
  };
  const parsed = parseSpent(JSON.stringify(json), "File x");
  assert.deepEqual([parsed.serial, parsed.until], ["7a1b0c", "2030-01-15T12:00:00.000+00:00"]);
  const digits = "0123456789abcdef".repeat(4);
  assert.equal(
    parseSpent(JSON.stringify({ ...json, key_sha256: digits }), "File x").keySha256,
    digits,
  );
  assert.equal(
    parseSpent(JSON.stringify({ ...json, node_type: "door" }), "File x").nodeType,
    "door",
  );
  const wrong: [string, unknown][] = [
    ["key_sha256", "ab".repeat(32) + "a"],
    ["key_sha256", "x" + "ab".repeat(32)],
    ["secret_sha256", "ab".repeat(32) + "a"],
    ["secret_sha256", "x" + "ab".repeat(32)],
    ["certificate", "x-----BEGIN CERTIFICATE-----"],
    ["serial", "7g"],
    ["serial", "x7a"],
    ["serial", "7ax"],
    ["node_type", "Xedge"],
    ["node_type", "edgex"],
    ["until", "tomorrow at noon"],
    ["until", "Mon 2030-01-15"], // Date.parse takes both of these
    ["until", "2030-01-15 12:00"],
    ["until", "9999-99-99T99:99:99Z"],
  ];
  for (const [field, value] of wrong) {
    assert.throws(() => parseSpent(JSON.stringify({ ...json, [field]: value }), "File x"), {
      message: `File x has no valid field "${field}"`,
    });
  }
});

// ---------------------------------------------------------------------------------------------
// record_fields.ts

Deno.test("record fields: a text field is a string of its pattern; a count a whole number of 1 or more", () => {
  const record = recordFields(
    JSON.stringify({ one: 1, zero: 0, half: 1.5, text: "5", huge: 2 ** 53, n: 123, x: "x" }),
    "Record r",
  );
  const invalid = (name: string) => ({ message: `Record r has no valid field "${name}"` });
  assert.equal(record.count("one"), 1);
  assert.equal(record.count("absent", 1), 1);
  for (const name of ["zero", "half", "text", "huge", "absent"]) {
    assert.throws(() => record.count(name), invalid(name));
  }
  assert.throws(() => record.count("zero", 1), invalid("zero"), "present, so no fallback");
  assert.equal(record.text("x", /^x$/), "x");
  assert.throws(() => record.text("n", /^[0-9]+$/), invalid("n"));
  assert.throws(() => record.text("x", /^y$/), invalid("x"));
  assert.throws(() => recordFields("{", "Record r"), /^Error: Record r is not JSON: /);
  assert.equal(recordFields("null", "Record r").count("absent", 2), 2);
});
