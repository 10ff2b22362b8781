/**
 * The boot's completion of a key and certificate a crash left half renamed (src/live/node_pair.ts)
 * puts in place only what the interrupted renewal or registration would have: a certificate the
 * fleet CA issued to this node, valid, holding the key it is paired with, and not older than what
 * it replaces. The crash points themselves are killed for real in enrol_crash_test.ts; here each
 * refusal is shown on its own.
 */
import assert from "node:assert/strict";
import { dropSpentSecret, settlePair } from "../src/live/node_pair.ts";
import { initCa, type Issuer, loadIssuer, signNodeCsr } from "../src/trust/ca.ts";
import { makeNodeKeyAndCsr } from "../src/trust/csr.ts";
import { addNodeSecret } from "../src/trust/node_secrets.ts";

const HOUR = 3_600_000;

interface Pair {
  readonly keyPem: string;
  readonly chainPem: string;
}

interface Folder {
  readonly dir: string;
  readonly issuer: Issuer;
  readonly files: { keyFile: string; certFile: string; caFile: string; secretFile: string };
  readonly lines: string[];
  /** A key and a certificate the CA issues to `nodeId` (at `now`). */
  issue(nodeId?: string, now?: Date, issuer?: Issuer): Promise<Pair>;
  /** Writes a pair's files: `where` "" for the pair in place, ".new" for a pending one. */
  put(pair: Pair, where: { key?: string; cert?: string }): Promise<void>;
  settle(now?: Date): Promise<string[]>;
  dispose(): Promise<void>;
}

async function folder(): Promise<Folder> {
  const dir = await Deno.makeTempDir({ prefix: "portcullis-pair-" });
  await initCa(`${dir}/ca`, { names: ["127.0.0.1"] });
  const issuer = await loadIssuer(`${dir}/ca`);
  const files = {
    keyFile: `${dir}/node.key`,
    certFile: `${dir}/node.crt`,
    caFile: `${dir}/ca/root.crt`,
    secretFile: `${dir}/node.secret`,
  };
  const lines: string[] = [];
  const made: Folder = {
    dir,
    issuer,
    files,
    lines,
    async issue(nodeId = "edge-1", now = new Date(), by = issuer) {
      const { keyPem, csrPem } = await makeNodeKeyAndCsr(nodeId);
      const signed = await signNodeCsr(by, {
        csrPem,
        nodeId,
        nodeType: "edge",
        lifetimeDays: 30,
        now,
      });
      if (!signed.ok) throw new Error(signed.detail);
      return { keyPem, chainPem: signed.chainPem };
    },
    async put(pair, where) {
      if (where.key !== undefined) {
        await Deno.writeTextFile(`${files.keyFile}${where.key}`, pair.keyPem, { mode: 0o600 });
      }
      if (where.cert !== undefined) {
        await Deno.writeTextFile(`${files.certFile}${where.cert}`, pair.chainPem, { mode: 0o600 });
      }
    },
    settle(now) {
      return settlePair({ nodeId: "edge-1", files, log: (line) => lines.push(line), now });
    },
    dispose: () => Deno.remove(dir, { recursive: true }),
  };
  return made;
}

async function inPlace(f: Folder): Promise<Pair> {
  return {
    keyPem: await Deno.readTextFile(f.files.keyFile),
    chainPem: await Deno.readTextFile(f.files.certFile),
  };
}

Deno.test("settlePair() completes a whole pending pair, key first, and says so", async () => {
  const f = await folder();
  try {
    const old = await f.issue("edge-1", new Date(Date.now() - HOUR));
    const renewed = await f.issue();
    await f.put(old, { key: "", cert: "" });
    await f.put(renewed, { key: ".new", cert: ".new" });
    const renamed = await f.settle();
    assert.deepEqual(renamed, [`${f.files.keyFile}.new`, `${f.files.certFile}.new`]);
    assert.deepEqual(await inPlace(f), renewed);
    assert.match(f.lines.join("\n"), /completed the node's key and certificate a crash left/);
    assert.deepEqual(await f.settle(), [], "nothing left to complete");
  } finally {
    await f.dispose();
  }
});

Deno.test("settlePair() completes a certificate whose key is in place already (killed between the renames)", async () => {
  const f = await folder();
  try {
    const old = await f.issue("edge-1", new Date(Date.now() - HOUR));
    const renewed = await f.issue();
    await f.put(old, { cert: "" });
    await f.put(renewed, { key: "", cert: ".new" });
    assert.deepEqual(await f.settle(), [`${f.files.certFile}.new`]);
    assert.deepEqual(await inPlace(f), renewed);
    // No certificate in place at all (a registration killed between its renames): the same.
    const g = await folder();
    try {
      const registered = await g.issue();
      await g.put(registered, { key: "", cert: ".new" });
      assert.deepEqual(await g.settle(), [`${g.files.certFile}.new`]);
      assert.deepEqual(await inPlace(g), registered);
    } finally {
      await g.dispose();
    }
  } finally {
    await f.dispose();
  }
});

Deno.test("settlePair() puts <key>.new in place when the certificate in place holds it and not the key", async () => {
  const f = await folder();
  try {
    const old = await f.issue("edge-1", new Date(Date.now() - HOUR));
    const renewed = await f.issue();
    await f.put(old, { key: "" });
    await f.put(renewed, { key: ".new", cert: "" });
    assert.deepEqual(await f.settle(), [`${f.files.keyFile}.new`]);
    assert.deepEqual(await inPlace(f), renewed);
  } finally {
    await f.dispose();
  }
});

Deno.test("settlePair() leaves a pending certificate that is another node's, another CA's, cut short, expired, older, or of neither key", async () => {
  const f = await folder();
  const other = await folder();
  try {
    const current = await f.issue("edge-1", new Date(Date.now() - HOUR));
    const pendings: [string, () => Promise<Pair>, Date?][] = [
      ["another node's", () => f.issue("edge-2")],
      ["another CA's", () => f.issue("edge-1", new Date(), other.issuer)],
      ["cut short", async () => {
        const pair = await f.issue();
        return { ...pair, chainPem: pair.chainPem.slice(0, 300) };
      }],
      ["expired", () => f.issue(), new Date(Date.now() + 40 * 24 * HOUR)],
      ["older than the one in place", () => f.issue("edge-1", new Date(Date.now() - 2 * HOUR))],
      ["holding neither key", async () => ({
        keyPem: (await makeNodeKeyAndCsr("edge-1")).keyPem,
        chainPem: (await f.issue()).chainPem,
      })],
    ];
    for (const [what, make, now] of pendings) {
      await f.put(current, { key: "", cert: "" });
      await f.put(await make(), { key: ".new", cert: ".new" });
      assert.deepEqual(await f.settle(now), [], what);
      assert.deepEqual(await inPlace(f), current, what);
    }
  } finally {
    await f.dispose();
    await other.dispose();
  }
});

Deno.test("settlePair() with no certificate in place completes only a pending one issued after the registration secret", async () => {
  const f = await folder();
  try {
    // A node provisioned again: the secret is new, the pending pair an earlier incarnation's.
    const earlier = await f.issue("edge-1", new Date(Date.now() - HOUR));
    const { file } = await addNodeSecret(`${f.dir}/ca/secrets`, "edge-1", "edge");
    await Deno.copyFile(file, f.files.secretFile);
    await f.put(earlier, { key: ".new", cert: ".new" });
    assert.deepEqual(await f.settle(), [], "an earlier incarnation's pair");
    await assert.rejects(Deno.stat(f.files.certFile), Deno.errors.NotFound);
    // The registration this secret made: completed.
    const registered = await f.issue();
    await f.put(registered, { key: ".new", cert: ".new" });
    assert.equal((await f.settle()).length, 2);
    assert.deepEqual(await inPlace(f), registered);
  } finally {
    await f.dispose();
  }
});

Deno.test("dropSpentSecret() removes a secret the certificate in place was issued for, keeps a newer one", async () => {
  const f = await folder();
  try {
    const options = { nodeId: "edge-1", files: f.files, log: (l: string) => f.lines.push(l) };
    const { file } = await addNodeSecret(`${f.dir}/ca/secrets`, "edge-1", "edge");
    await Deno.copyFile(file, f.files.secretFile);
    // Issued before the secret was made (an earlier incarnation): the secret is a new one.
    await f.put(await f.issue("edge-1", new Date(Date.now() - HOUR)), { key: "", cert: "" });
    assert.equal(await dropSpentSecret(options), false);
    assert.ok(await Deno.stat(f.files.secretFile));
    // Issued after it: its registration spent it.
    await f.put(await f.issue(), { key: "", cert: "" });
    assert.equal(await dropSpentSecret(options), true);
    await assert.rejects(Deno.stat(f.files.secretFile), Deno.errors.NotFound);
    assert.match(f.lines.join("\n"), /removed the registration secret/);
  } finally {
    await f.dispose();
  }
});
