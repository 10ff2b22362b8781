/**
 * The rooted read (src/config/rooted_read.ts) and the reads that go through it (issue 14, item 3
 * and "secrets at rest"): a file that is, or links to, something outside its root is refused by
 * name and never read; so are a FIFO, a device, a file over its bound and a secret others may read.
 * Every refusal names the file and the reason; the outside file's marker appears nowhere.
 *
 * @module
 */
import assert from "node:assert/strict";
import type { IncomingMessage } from "node:http";
import { join } from "node:path";
import { commitCache, stageCache, verifyCache } from "../src/live/cache.ts";
import {
  checkRooted,
  openRooted,
  readRooted,
  readRootedText,
  RootedReadError,
} from "../src/config/rooted_read.ts";
import { parseRuntime, readRuntimeTexts } from "../src/config/tenant_files.ts";
import { hashFileSet } from "../src/config/file_set.ts";
import { tokenAuth } from "../src/hub/auth.ts";
import { TenantLabels } from "../src/observe/tenant_label.ts";
import { runAction } from "../src/proxy/actions.ts";
import { loadTenants } from "../src/proxy/tenants.ts";
import { acmeChallenge } from "../src/tls/acme.ts";
import { CertStore } from "../src/tls/certificates.ts";
import { TestPki, writeCertificate } from "./fixtures/certs.ts";

/** What the outside file holds: it must never show up in a refusal, a reply or a log line. */
const MARKER = "rooted-read-marker-5b1e07";

/** A root folder and, beside it, a folder holding a "secret" with the marker. */
interface Place {
  readonly root: string;
  readonly secret: string;
  dispose(): Promise<void>;
}

async function place(): Promise<Place> {
  const base = await Deno.makeTempDir({ prefix: "portcullis-rooted-" });
  await Deno.mkdir(join(base, "root"));
  await Deno.mkdir(join(base, "outside"));
  const secret = join(base, "outside", "secret.txt");
  await Deno.writeTextFile(secret, `root:x:0:0:${MARKER}:/root:/bin/sh\n`.repeat(3));
  return {
    root: join(base, "root"),
    secret,
    dispose: () => Deno.remove(base, { recursive: true }),
  };
}

/** The refusal `pending` must reject with. */
async function refusalOf(pending: Promise<unknown>): Promise<RootedReadError> {
  try {
    await pending;
  } catch (error) {
    assert.ok(error instanceof RootedReadError, `not a RootedReadError: ${error}`);
    assert.ok(!error.message.includes(MARKER), error.message);
    return error;
  }
  throw new assert.AssertionError({ message: "the read was not refused" });
}

Deno.test("readRootedText() reads a file inside its root, and a symlink that stays inside", async () => {
  const p = await place();
  try {
    await Deno.mkdir(join(p.root, "pages"));
    await Deno.writeTextFile(join(p.root, "pages", "real.html"), "inside");
    await Deno.symlink(join(p.root, "pages", "real.html"), join(p.root, "link.html"));
    await Deno.symlink("pages/real.html", join(p.root, "relative.html"));
    assert.equal(await readRootedText(p.root, "pages/real.html"), "inside");
    assert.equal(await readRootedText(p.root, "link.html"), "inside");
    assert.equal(await readRootedText(p.root, "relative.html"), "inside");
    assert.equal(await readRootedText(p.root, join(p.root, "link.html")), "inside");
    assert.equal((await checkRooted(p.root, "link.html")).size, 6);
    const opened = await openRooted(p.root, join(p.root, "pages", "real.html"));
    assert.deepEqual([opened.file, opened.info.size], ["pages/real.html", 6]);
    opened.handle.close();
  } finally {
    await p.dispose();
  }
});

Deno.test("openRooted() refuses a symlink that resolves outside its root, by name, unread", async () => {
  const p = await place();
  try {
    await Deno.mkdir(join(p.root, "sub"));
    await Deno.symlink(p.secret, join(p.root, "sub", "zz.yaml"));
    const refused = await refusalOf(readRooted(p.root, "sub/zz.yaml"));
    assert.equal(refused.reason, "outside");
    assert.equal(refused.file, "sub/zz.yaml");
    assert.equal(refused.message, `File "sub/zz.yaml" resolves outside "${p.root}"`);
    // A folder on the way that links out is the same escape.
    await Deno.symlink(join(p.secret, ".."), join(p.root, "away"));
    assert.equal((await refusalOf(readRooted(p.root, "away/secret.txt"))).reason, "outside");
  } finally {
    await p.dispose();
  }
});

Deno.test("openRooted() refuses a name that lies outside its root as written", async () => {
  const p = await place();
  try {
    for (const name of ["../outside/secret.txt", p.secret, "sub/../../outside/secret.txt"]) {
      const refused = await refusalOf(readRooted(p.root, name));
      assert.equal(refused.reason, "outside", name);
      assert.match(refused.message, /lies outside/);
    }
  } finally {
    await p.dispose();
  }
});

Deno.test("openRooted() refuses a folder, a FIFO and a device, and never blocks on them", async () => {
  const p = await place();
  try {
    await Deno.mkdir(join(p.root, "folder"));
    const fifo = await new Deno.Command("mkfifo", { args: [join(p.root, "pipe")] }).output();
    assert.equal(fifo.code, 0, "mkfifo");
    await Deno.symlink("/dev/zero", join(p.root, "zero"));
    for (const name of ["folder", "pipe", "zero"]) {
      let timer: ReturnType<typeof setTimeout> | undefined;
      const deadline = new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new Error(`${name}: the read blocked`)), 10_000);
      });
      try {
        const refused = await refusalOf(Promise.race([readRooted(p.root, name), deadline]));
        assert.equal(refused.reason, name === "zero" ? "outside" : "not_regular", name);
      } finally {
        clearTimeout(timer);
      }
    }
  } finally {
    await p.dispose();
  }
});

Deno.test("readRooted() refuses a file larger than its bound, and reads one at the bound", async () => {
  const p = await place();
  try {
    await Deno.writeFile(join(p.root, "big.bin"), new Uint8Array(1025));
    const refused = await refusalOf(readRooted(p.root, "big.bin", { maxBytes: 1024 }));
    assert.deepEqual([refused.reason, refused.size], ["too_large", 1025]);
    assert.equal((await readRooted(p.root, "big.bin", { maxBytes: 1025 })).length, 1025);
  } finally {
    await p.dispose();
  }
});

Deno.test("openRooted() refuses a secret that group or others may read, naming its mode", async () => {
  const p = await place();
  try {
    const file = join(p.root, "node.token");
    await Deno.writeTextFile(file, "token\n");
    for (const mode of [0o644, 0o640, 0o604, 0o660, 0o602]) {
      await Deno.chmod(file, mode);
      const refused = await refusalOf(readRooted(p.root, "node.token", { secret: true }));
      const octal = mode.toString(8).padStart(4, "0");
      assert.equal(refused.reason, "exposed");
      assert.equal(refused.mode, mode);
      assert.equal(
        refused.message,
        `File "node.token" is open to group or others (mode ${octal}; make it 0600)`,
      );
      assert.equal(await readRootedText(p.root, "node.token"), "token\n", "not a secret: read");
    }
    for (const mode of [0o600, 0o400]) {
      await Deno.chmod(file, mode);
      assert.equal(await readRootedText(p.root, "node.token", { secret: true }), "token\n");
    }
  } finally {
    await p.dispose();
  }
});

Deno.test("openRooted() never reads the outside file while a link is swapped under it", async () => {
  const p = await place();
  try {
    const target = join(p.root, "page.html");
    await Deno.writeTextFile(target, "inside");
    let swapping = true;
    const swapper = (async () => {
      for (let i = 0; swapping; i++) {
        const next = join(p.root, `.next-${i}`);
        if (i % 2 === 0) await Deno.symlink(p.secret, next);
        else await Deno.writeTextFile(next, "inside");
        await Deno.rename(next, target);
      }
    })();
    const reasons = new Map<string, number>();
    try {
      for (let round = 0; round < 400; round++) {
        try {
          assert.equal(await readRootedText(p.root, "page.html"), "inside");
          reasons.set("read", (reasons.get("read") ?? 0) + 1);
        } catch (error) {
          assert.ok(error instanceof RootedReadError, String(error));
          assert.ok(!error.message.includes(MARKER));
          reasons.set(error.reason, (reasons.get(error.reason) ?? 0) + 1);
        }
      }
    } finally {
      swapping = false;
      await swapper;
    }
    for (const reason of reasons.keys()) {
      assert.ok(["read", "outside", "changed", "missing"].includes(reason), reason);
    }
  } finally {
    await p.dispose();
  }
});

Deno.test("openRooted() never reads the outside file while a folder is swapped for a link and back", async () => {
  const p = await place();
  try {
    const sub = join(p.root, "sub");
    const parked = join(p.secret, "..", "..", "parked");
    await Deno.mkdir(sub);
    await Deno.writeTextFile(join(sub, "secret.txt"), "inside");
    let swapping = true;
    const swapper = (async () => {
      while (swapping) {
        await Deno.rename(sub, parked);
        await Deno.symlink(join(p.secret, ".."), sub);
        await Deno.remove(sub);
        await Deno.rename(parked, sub);
      }
    })();
    let read = 0;
    try {
      for (let round = 0; round < 1000; round++) {
        try {
          assert.equal(await readRootedText(p.root, "sub/secret.txt"), "inside");
          read++;
        } catch (error) {
          assert.ok(error instanceof RootedReadError, String(error));
          assert.ok(!error.message.includes(MARKER));
        }
      }
    } finally {
      swapping = false;
      await swapper;
    }
    assert.ok(read < 1000, "the swap was seen");
  } finally {
    await p.dispose();
  }
});

Deno.test("readRuntimeTexts() refuses a tenant file linking outside the folder, by name only", async () => {
  const p = await place();
  try {
    await Deno.writeTextFile(join(p.root, "a.test.yaml"), "host: a.test\n");
    await Deno.symlink(p.secret, join(p.root, "zz.yaml"));
    const read = await readRuntimeTexts(p.root);
    assert.deepEqual([...read.texts.keys()], ["a.test.yaml"]);
    assert.deepEqual(read.problems, [{
      file: join(p.root, "zz.yaml"),
      path: [],
      message: `File "zz.yaml" resolves outside "${p.root}"`,
    }]);
  } finally {
    await p.dispose();
  }
});

Deno.test("parseRuntime() shows an excerpt of a bad value, never a whole document", () => {
  const document = `root:x:0:0:${MARKER}:/root:/bin/sh\n`.repeat(40);
  const { problems } = parseRuntime("/srv/tenants", new Map([["zz.yaml", document]]));
  assert.equal(problems.length, 1);
  const value = problems[0].value as string;
  assert.equal(typeof value, "string");
  assert.ok(value.length <= 80, `${value.length} characters`);
  assert.ok(JSON.stringify(problems).length < 400, JSON.stringify(problems));
});

Deno.test("runAction() opens a body file at every request: a link swapped in after load is refused", async () => {
  const p = await place();
  try {
    await Deno.writeTextFile(join(p.root, "page.html"), "page");
    await Deno.writeTextFile(
      join(p.root, "a.test.yaml"),
      "host: a.test\nroutes:\n  - { match: { path: / }, respond: { body_file: page.html } }\n",
    );
    const registry = await loadTenants(p.root);
    const action = registry.get("a.test")!.routes.match("GET", "/", "a.test")!.route.action;
    assert.equal(action.kind, "respond");
    if (action.kind !== "respond") return;
    const head = { method: "GET", path: "/", query: "" };
    const served = await runAction(action, head, {});
    assert.equal(served.headers?.["content-length"], "4");
    served.stream?.cancel();
    await Deno.remove(join(p.root, "page.html"));
    await Deno.symlink(p.secret, join(p.root, "page.html"));
    const refused = await refusalOf(Promise.resolve().then(() => runAction(action, head, {})));
    assert.equal(refused.message, `File "page.html" resolves outside "${p.root}"`);
  } finally {
    await p.dispose();
  }
});

Deno.test("TenantLabels.fromFile() refuses a salt linking out of its folder or open to others", async () => {
  const p = await place();
  try {
    const salt = join(p.root, "metrics-salt");
    await Deno.symlink(p.secret, salt);
    const linked = await TenantLabels.fromFile(salt);
    assert.equal(linked.labels, undefined);
    assert.equal(
      linked.problem,
      `Cannot read tenant label salt "${salt}": resolves outside "${p.root}"`,
    );
    await Deno.remove(salt);
    await Deno.writeTextFile(salt, "0123456789abcdef-salt\n", { mode: 0o644 });
    const exposed = await TenantLabels.fromFile(salt);
    assert.equal(
      exposed.problem,
      `Cannot read tenant label salt "${salt}": is open to group or others ` +
        "(mode 0644; make it 0600)",
    );
    await Deno.chmod(salt, 0o600);
    assert.ok((await TenantLabels.fromFile(salt)).labels);
  } finally {
    await p.dispose();
  }
});

Deno.test("CertStore refuses a key linking out of its folder or open to others, naming both", async () => {
  const p = await place();
  const pki = await TestPki.create();
  try {
    const issued = await pki.issue("a.test", { unwritten: true });
    const certFile = join(p.root, "a.crt");
    const keyFile = join(p.root, "a.key");
    const outsideKey = join(p.secret, "..", "a.key");
    await writeCertificate(issued, { certFile, keyFile: outsideKey });
    await Deno.symlink(outsideKey, keyFile);
    const lines: string[] = [];
    const store = new CertStore({
      sources: [{ certFile, keyFile, isDefault: true }],
      minVersion: "TLSv1.2",
      bootstrapName: "edge.test",
      log: (line) => lines.push(line),
    });
    assert.deepEqual(await store.reload(), [
      `Cannot load certificate ${certFile}: key file ${keyFile} resolves outside "${p.root}"`,
    ]);
    assert.equal(store.bootstrap, true);
    await Deno.remove(keyFile);
    await Deno.copyFile(outsideKey, keyFile);
    await Deno.chmod(keyFile, 0o644);
    assert.deepEqual(await store.reload(), [
      `Cannot load certificate ${certFile}: key file ${keyFile} is open to group or others ` +
      "(mode 0644; make it 0600)",
    ]);
    await Deno.chmod(keyFile, 0o600);
    assert.deepEqual(await store.reload(), []);
    assert.equal(store.bootstrap, false);
  } finally {
    await pki.dispose();
    await p.dispose();
  }
});

Deno.test("acmeChallenge() does not serve a challenge file linking outside its folder", async () => {
  const p = await place();
  try {
    await Deno.writeTextFile(join(p.root, "good-token"), "good-token.thumbprint");
    await Deno.symlink(p.secret, join(p.root, "evil-token"));
    const prefix = "/.well-known/acme-challenge/";
    const good = await acmeChallenge(`${prefix}good-token`, p.root);
    assert.equal(new TextDecoder().decode(good?.body as Uint8Array), "good-token.thumbprint");
    assert.equal(await acmeChallenge(`${prefix}evil-token`, p.root), undefined);
  } finally {
    await p.dispose();
  }
});

Deno.test("verifyCache() refuses a generation folder swapped for a link out of the cache", async () => {
  const p = await place();
  try {
    const files = new Map([["a.test.yaml", new TextEncoder().encode("host: a.test\n")]]);
    const folder = await stageCache(p.root, files);
    await commitCache(p.root, folder, await hashFileSet(files));
    assert.equal((await verifyCache(p.root)).state, "verified");
    const copy = join(p.secret, "..", "gen-1");
    await Deno.rename(folder, copy);
    await Deno.symlink(copy, folder);
    const check = await verifyCache(p.root);
    assert.equal(check.state, "refused");
    assert.match(check.state === "refused" ? check.reason : "", /resolves outside/);
  } finally {
    await p.dispose();
  }
});

Deno.test("tokenAuth() refuses a token file others may read, and one linking out of its folder", async () => {
  const p = await place();
  try {
    const token = "a-token-0123456789";
    const ask = (node: string) =>
      tokenAuth(p.root, { log: (line) => lines.push(line) })(
        { headers: { authorization: `Bearer ${token}` } } as IncomingMessage,
        node,
      );
    const lines: string[] = [];
    await Deno.writeTextFile(join(p.root, "open.token"), `${token}\n`, { mode: 0o644 });
    await Deno.writeTextFile(join(p.secret, "..", "far.token"), `${token}\n`, { mode: 0o600 });
    await Deno.symlink(join(p.secret, "..", "far.token"), join(p.root, "far.token"));
    await Deno.writeTextFile(join(p.root, "kept.token"), `${token}\n`, { mode: 0o600 });
    assert.equal((await ask("open")).ok, false);
    assert.equal((await ask("far")).ok, false);
    assert.equal((await ask("kept")).ok, true);
    const said = lines.join("\n");
    assert.match(said, /"open\.token" is open to group or others \(mode 0644; make it 0600\)/);
    assert.match(said, /"far\.token" resolves outside/);
  } finally {
    await p.dispose();
  }
});
