/**
 * Kills operator-mutation survivors in src/hub/auth.ts, src/hub/api_auth.ts,
 * src/hub/enrolment.ts and src/hub/fleet_trust.ts: each test names the rule it guards. In process
 * and fast (these run for every mutant of those modules): the token book on a temp folder, the
 * api's gate and node middleware in a small Hono app handed a fake socket, certificates made
 * here, enrolment against a real CA folder.
 *
 * @module
 */
import assert from "node:assert/strict";
import type { IncomingMessage } from "node:http";
import type { TLSSocket } from "node:tls";
import "reflect-metadata";
import * as x509 from "@peculiar/x509";
import { Hono } from "hono";
import {
  certificateAuth,
  certificateNode,
  commonNamesOf,
  NODE_ID,
  type NodeAuthenticator,
  type RevocationCheck,
  tokenAuth,
} from "../src/hub/auth.ts";
import { type HubEnv, nodeAuth, outsiderGate, REGISTER } from "../src/hub/api_auth.ts";
import { replyOf } from "../src/server/hono_adapter.ts";
import { BootError } from "../src/boot/boot_error.ts";
import type { CaSettings, HubConfig } from "../src/hub/config.ts";
import { Enrolment } from "../src/hub/enrolment.ts";
import { loadFleetTrust } from "../src/hub/fleet_trust.ts";
import { NodeStanding } from "../src/hub/node_standing.ts";
import type { Reply } from "../src/request/reply.ts";
import { type CaFiles, initCa, loadIssuer } from "../src/trust/ca.ts";
import { writeCrl } from "../src/trust/crl.ts";
import { makeNodeKeyAndCsr } from "../src/trust/csr.ts";
import {
  type NodeEntry,
  readNodeEntry,
  writeNodeEntry,
  writeRevokedMarker,
} from "../src/trust/node_registry.ts";
import { addNodeSecret, NodeSecrets } from "../src/trust/node_secrets.ts";

/** A tokens folder; `write` puts a token file (0600 unless told), `lines` is what the book logged. */
async function tokensFolder() {
  const dir = await Deno.makeTempDir({ prefix: "portcullis-kills-tokens-" });
  const lines: string[] = [];
  return {
    dir,
    lines,
    auth: () => tokenAuth(dir, { log: (line) => lines.push(line) }),
    async write(name: string, text: string, mode = 0o600) {
      await Deno.writeTextFile(`${dir}/${name}`, text, { mode });
      await Deno.chmod(`${dir}/${name}`, mode);
    },
    /** Sets the folder's times to `secondsAgo` in the past (as a restore with times kept does). */
    async age(secondsAgo: number) {
      const then = new Date(Date.now() - secondsAgo * 1000);
      await Deno.utime(dir, then, then);
    },
    dispose: () => Deno.remove(dir, { recursive: true }),
  };
}

/** The failure kind a result carries, or "ok". */
function kindOf(result: { ok: true } | { ok: false; kind: string }): string {
  return result.ok ? "ok" : result.kind;
}

/** A request carrying `authorization` (none when undefined). */
function withHeader(authorization?: string): IncomingMessage {
  return { headers: authorization === undefined ? {} : { authorization } } as IncomingMessage;
}

// ---------------------------------------------------------------------------------------------
// auth.ts: the token book

Deno.test("hub tokens: ids of every character a node id may hold authenticate; others never do", async () => {
  const t = await tokensFolder();
  try {
    const good = ["Edge-1", "edge.A_b-9", "7seas"];
    for (const id of good) await t.write(`${id}.token`, `tok-${id.length}\n`);
    // Names that are no node id, holding a good token: nobody authenticates through them.
    const bad = ["-edge", ".edge", "edge!x", "e".repeat(64)];
    for (const id of bad) await t.write(`${id}.token`, "bad-id-token\n");
    const auth = t.auth();
    for (const id of good) {
      assert.equal(kindOf(await auth.verify(id, `tok-${id.length}`)), "ok", id);
    }
    for (const id of bad) {
      assert.equal(kindOf(await auth.verify(id, "bad-id-token")), "unauthenticated", id);
    }
    for (const id of good) assert.ok(NODE_ID.test(id), id);
    for (const id of bad) assert.ok(!NODE_ID.test(id), id);
  } finally {
    await t.dispose();
  }
});

Deno.test("hub tokens: a token of every RFC 6750 character authenticates, through the header too", async () => {
  const t = await tokensFolder();
  try {
    const tokens: Record<string, string> = {
      "edge-up": "ABCXYZ",
      "edge-low": "abcxyz",
      "edge-dig": "0123456789",
      "edge-dot": "a.b",
      "edge-und": "a_b",
      "edge-til": "a~b",
      "edge-plus": "a+b",
      "edge-slash": "a/b",
      "edge-dash": "a-b",
      "edge-pad": "ab==",
      "edge-one": "q",
    };
    for (const [node, token] of Object.entries(tokens)) {
      await t.write(`${node}.token`, `${token}\n`);
    }
    const auth = t.auth();
    for (const [node, token] of Object.entries(tokens)) {
      assert.equal(kindOf(await auth.verify(node, token)), "ok", `${node} ${token}`);
      assert.equal(kindOf(await auth(withHeader(`Bearer ${token}`), node)), "ok", `${node} header`);
    }
    assert.deepEqual(t.lines, []);
  } finally {
    await t.dispose();
  }
});

Deno.test("hub tokens: a token file holding characters no bearer token carries authenticates nobody, said once", async () => {
  const t = await tokensFolder();
  try {
    await t.write("edge-mid.token", "x!y\n");
    await t.write("edge-bang.token", "!\n");
    await t.write("edge-blank.token", " \n");
    const auth = t.auth();
    for (let i = 0; i < 2; i++) {
      assert.equal(kindOf(await auth.verify("edge-mid", "x!y")), "unauthenticated");
      assert.equal(kindOf(await auth.verify("edge-bang", "!")), "unauthenticated");
      assert.equal(kindOf(await auth.verify("edge-blank", "")), "unauthenticated");
    }
    const said = t.lines.filter((line) => line.includes("holds characters"));
    assert.equal(said.length, 2, t.lines.join("\n"));
    assert.ok(said.some((line) => line.includes(`edge-mid.token holds characters`)));
    assert.ok(said.some((line) => line.includes(`node "edge-bang" cannot authenticate`)));
    // A blank file is no refusal to report: the node simply has no token.
    assert.ok(!t.lines.some((line) => line.includes("edge-blank")), t.lines.join("\n"));
  } finally {
    await t.dispose();
  }
});

Deno.test("hub tokens: a token of 1024 characters authenticates, one of 1025 nobody", async () => {
  const t = await tokensFolder();
  try {
    const at = "a".repeat(1024);
    const over = "b".repeat(1025);
    await t.write("edge-at.token", `${at}\n`);
    await t.write("edge-over.token", `${over}\n`);
    const auth = t.auth();
    assert.equal(kindOf(await auth.verify("edge-at", at)), "ok");
    assert.equal(kindOf(await auth(withHeader(`Bearer ${at}`), "edge-at")), "ok");
    assert.equal(kindOf(await auth.verify("edge-over", over)), "unauthenticated");
    assert.equal(kindOf(await auth(withHeader(`Bearer ${over}`), "edge-over")), "unauthenticated");
  } finally {
    await t.dispose();
  }
});

Deno.test("hub tokens: a token file of 4096 bytes is read (trimmed), one of 4097 refused by name", async () => {
  const t = await tokensFolder();
  try {
    await t.write("edge-4096.token", "tok-a" + "\n".repeat(4096 - 5));
    await t.write("edge-4097.token", "tok-b" + "\n".repeat(4097 - 5));
    const auth = t.auth();
    assert.equal(kindOf(await auth.verify("edge-4096", "tok-a")), "ok");
    assert.equal(kindOf(await auth.verify("edge-4097", "tok-b")), "unauthenticated");
    assert.ok(!t.lines.some((line) => line.includes("edge-4096")), t.lines.join("\n"));
    assert.equal(
      t.lines.filter((line) => line.includes("edge-4097")).length,
      1,
      t.lines.join("\n"),
    );
  } finally {
    await t.dispose();
  }
});

Deno.test("hub tokens: the Authorization header is exactly `Bearer <token>`, nothing before or after", async () => {
  const t = await tokensFolder();
  try {
    await t.write("edge-a.token", "good-token\n");
    const auth = t.auth();
    assert.equal(kindOf(await auth(withHeader("Bearer good-token"), "edge-a")), "ok");
    for (
      const header of [
        undefined,
        "",
        "Bearer good-token extra",
        "Bearer good-token ",
        "XBearer good-token",
        " Bearer good-token",
        "Basic good-token",
        "Bearer  good-token",
      ]
    ) {
      const result = await auth(withHeader(header), "edge-a");
      assert.equal(kindOf(result), "unauthenticated", JSON.stringify(header));
    }
  } finally {
    await t.dispose();
  }
});

Deno.test("hub tokens: a removed token is node_revoked to its holder only; a guess stays unauthenticated", async () => {
  const t = await tokensFolder();
  try {
    await t.write("edge-a.token", "first-token\n");
    const auth = t.auth();
    const first = await auth.verify("edge-a", "first-token");
    assert.equal(kindOf(first), "ok");
    assert.ok(first.ok);
    assert.equal(await first.revoked!(), false, "a current token is not revoked");
    // Replaced by rename (the folder changes): the old token is revoked, the new one is not.
    await t.write("edge-a.token.new", "second-token\n");
    await Deno.rename(`${t.dir}/edge-a.token.new`, `${t.dir}/edge-a.token`);
    const second = await auth.verify("edge-a", "second-token");
    assert.equal(kindOf(second), "ok");
    assert.ok(second.ok);
    assert.equal(await second.revoked!(), false, "the token that replaced one is not revoked");
    assert.equal(await first.revoked!(), true, "the replaced token is revoked");
    assert.equal(kindOf(await auth.verify("edge-a", "first-token")), "node_revoked");
    assert.equal(kindOf(await auth.verify("edge-a", "a-guess")), "unauthenticated");
    // Removed: its holder is told, a guess is not.
    await Deno.remove(`${t.dir}/edge-a.token`);
    assert.equal(kindOf(await auth.verify("edge-a", "second-token")), "node_revoked");
    assert.equal(await second.revoked!(), true);
    assert.equal(kindOf(await auth.verify("edge-a", "a-guess")), "unauthenticated");
    assert.equal(kindOf(await auth(withHeader("Bearer second-token"), "edge-a")), "node_revoked");
  } finally {
    await t.dispose();
  }
});

Deno.test("hub tokens: revoked/<node>.token is node_revoked from the first request; a bad one is said", async () => {
  const t = await tokensFolder();
  try {
    await Deno.mkdir(`${t.dir}/revoked`);
    await t.write("revoked/edge-r.token", "old-token\n");
    await t.write("revoked/edge-odd.token", "tok,en\n");
    await t.write("revoked/-edge.token", "dash-token\n");
    await t.write("revoked/edge-open.token", "open-token\n", 0o644);
    const auth = t.auth();
    assert.equal(kindOf(await auth.verify("edge-r", "old-token")), "node_revoked");
    assert.equal(kindOf(await auth(withHeader("Bearer old-token"), "edge-r")), "node_revoked");
    assert.equal(kindOf(await auth.verify("edge-r", "other")), "unauthenticated");
    // A header whose token is no bearer token is refused as such, whatever it matches.
    assert.equal(kindOf(await auth(withHeader("Bearer tok,en"), "edge-odd")), "unauthenticated");
    // A file whose name is no node id revokes nobody.
    assert.equal(kindOf(await auth.verify("-edge", "dash-token")), "unauthenticated");
    const said = t.lines.filter((line) =>
      line.includes(`a revoked token of "edge-open" is unread`)
    );
    assert.equal(said.length, 1, t.lines.join("\n"));
    assert.equal(t.lines.length, 1, t.lines.join("\n"));
  } finally {
    await t.dispose();
  }
});

Deno.test("hub tokens: no revoked folder is no refusal; one that cannot be read is said", async () => {
  const t = await tokensFolder();
  try {
    await t.write("edge-a.token", "good-token\n");
    assert.equal(kindOf(await t.auth().verify("edge-a", "good-token")), "ok");
    assert.deepEqual(t.lines, []);
    await t.write("revoked", "a file, not a folder\n");
    assert.equal(kindOf(await t.auth().verify("edge-a", "good-token")), "ok");
    assert.equal(t.lines.length, 1, t.lines.join("\n"));
    assert.match(t.lines[0], /Cannot read .*\/revoked: /);
  } finally {
    await t.dispose();
  }
});

Deno.test("hub tokens: a token file others may read authenticates nobody, said once; a missing folder is said", async () => {
  const t = await tokensFolder();
  try {
    await t.write("edge-open.token", "open-token\n", 0o644);
    const auth = t.auth();
    for (let i = 0; i < 3; i++) {
      assert.equal(kindOf(await auth.verify("edge-open", "open-token")), "unauthenticated");
    }
    assert.equal(t.lines.length, 1, t.lines.join("\n"));
    assert.match(
      t.lines[0],
      /hub tokens in .*edge-open\.token.*node "edge-open" cannot authenticate/,
    );
    const gone = tokenAuth(`${t.dir}/nowhere`, { log: (line) => t.lines.push(line) });
    assert.equal(kindOf(await gone.verify("edge-open", "open-token")), "unauthenticated");
    assert.match(t.lines[1], /Cannot read the tokens folder: .*no node can/);
  } finally {
    await t.dispose();
  }
});

Deno.test("hub tokens: a folder whose time moved to another past time is read again at once", async () => {
  const t = await tokensFolder();
  try {
    await t.write("edge-a.token", "token-a\n");
    await t.age(3600);
    const auth = t.auth();
    assert.equal(kindOf(await auth.verify("edge-a", "token-a")), "ok");
    // A file restored with its folder's times kept (rsync -t, tar): the mtime differs, though it
    // is older than the last read.
    await t.write("edge-b.token", "token-b\n");
    await t.age(7200);
    assert.equal(kindOf(await auth.verify("edge-b", "token-b")), "ok");
  } finally {
    await t.dispose();
  }
});

Deno.test("hub tokens: a settled folder is read again once 1000 ms have passed since the last read", async () => {
  const t = await tokensFolder();
  try {
    await t.write("edge-a.token", "token-one\n");
    await t.age(3600);
    const auth = t.auth();
    const start = Date.now();
    assert.equal(kindOf(await atTime(start, () => auth.verify("edge-a", "token-one"))), "ok");
    // Rewritten in place: the folder's mtime does not change; only the period shows it.
    await Deno.writeTextFile(`${t.dir}/edge-a.token`, "token-two\n");
    const second = await atTime(start + 1000, () => auth.verify("edge-a", "token-two"));
    assert.equal(kindOf(second), "ok");
    await Deno.writeTextFile(`${t.dir}/edge-a.token`, "token-three\n");
    const third = await atTime(start + 2000, () => auth.verify("edge-a", "token-three"));
    assert.equal(kindOf(third), "ok");
  } finally {
    await t.dispose();
  }
});

Deno.test("hub tokens: a read made 100 ms or less after the folder changed is not trusted", async () => {
  const t = await tokensFolder();
  try {
    await t.write("edge-a.token", "token-one\n");
    // Whole seconds, so the folder's time is exactly what was set.
    const changed = Math.floor(Date.now() / 1000) * 1000 - 2000;
    await Deno.utime(t.dir, changed / 1000, changed / 1000);
    assert.equal((await Deno.stat(t.dir)).mtime?.getTime(), changed);
    const auth = t.auth();
    assert.equal(
      kindOf(await atTime(changed + 100, () => auth.verify("edge-a", "token-one"))),
      "ok",
    );
    await Deno.writeTextFile(`${t.dir}/edge-a.token`, "token-two\n");
    const next = await atTime(changed + 101, () => auth.verify("edge-a", "token-two"));
    assert.equal(kindOf(next), "ok");
  } finally {
    await t.dispose();
  }
});

Deno.test("hub tokens: a folder read that finishes after a later one does not replace it", async () => {
  const t = await tokensFolder();
  const realReadDir = Deno.readDir;
  try {
    await t.write("edge-a.token", "tok-a\n");
    const auth = t.auth();
    // The first listing is held back until released: a slow read, overtaken by a later one.
    let calls = 0;
    let listed = false;
    let release = () => {};
    const gate = new Promise<void>((resolve) => release = resolve);
    Deno.readDir = (path: string | URL) => {
      if (++calls !== 1) return realReadDir(path);
      const entries = [...Deno.readDirSync(path)];
      listed = true;
      return (async function* heldListing() {
        await gate;
        yield* entries;
      })();
    };
    const slow = auth.verify("edge-a", "tok-a");
    while (!listed) await new Promise((resolve) => setTimeout(resolve, 5));
    await t.write("edge-b.token", "tok-b\n"); // after the slow read listed the folder
    const fresh = await auth.verify("edge-b", "tok-b");
    assert.ok(fresh.ok);
    release();
    assert.equal(kindOf(await slow), "ok");
    // The slow read's view (no edge-b) never replaced the later one's: edge-b's token was not
    // taken for one removed, so its holder's poll is not told it was revoked.
    assert.equal(await fresh.revoked!(), false);
    assert.equal(kindOf(await auth.verify("edge-b", "tok-b")), "ok");
  } finally {
    Deno.readDir = realReadDir;
    await t.dispose();
  }
});

Deno.test("hub tokens: a token file gone between the listing and the read is no refusal to report", async () => {
  const t = await tokensFolder();
  try {
    await t.write("edge-a.token", "good-token\n");
    await Deno.symlink(`${t.dir}/gone`, `${t.dir}/edge-z.token`); // what a removal mid-read leaves
    const auth = t.auth();
    assert.equal(kindOf(await auth.verify("edge-a", "good-token")), "ok");
    assert.equal(kindOf(await auth.verify("edge-z", "good-token")), "unauthenticated");
    assert.deepEqual(t.lines, []);
  } finally {
    await t.dispose();
  }
});

// ---------------------------------------------------------------------------------------------
// auth.ts: certificates

/** A certificate DER whose subject is `subject`, self-signed (the socket's verdict is faked). */
async function certificateDer(subject: x509.JsonName, serial = "7a1b2c"): Promise<Uint8Array> {
  const algorithm = { name: "ECDSA", namedCurve: "P-256", hash: "SHA-256" } as const;
  const keys = await crypto.subtle.generateKey(algorithm, true, ["sign", "verify"]);
  const cert = await x509.X509CertificateGenerator.createSelfSigned({
    serialNumber: serial,
    name: new x509.Name(subject),
    notBefore: new Date("2030-01-01T00:00:00Z"),
    notAfter: new Date("2030-02-01T00:00:00Z"),
    signingAlgorithm: algorithm,
    keys,
  }, crypto);
  return new Uint8Array(cert.rawData);
}

/** A TLS socket as the handshake left it: authorized or not, with the peer's DER (or none). */
function socketOf(authorized: boolean, raw?: Uint8Array): TLSSocket {
  return {
    authorized,
    getPeerCertificate: () => (raw ? { raw: Buffer.from(raw) } : {}),
  } as unknown as TLSSocket;
}

function tlsRequest(socket: TLSSocket): IncomingMessage {
  return { socket, headers: {} } as unknown as IncomingMessage;
}

Deno.test("hub mutual TLS: one CN equal to the node is that node, with its serial and end", async () => {
  const der = await certificateDer([{ CN: ["edge-1"] }]);
  const node = certificateNode(socketOf(true, der));
  assert.deepEqual(node, {
    ok: true,
    node: "edge-1",
    serial: "7a1b2c",
    notAfter: new Date("2030-02-01T00:00:00Z"),
  });
  const result = await certificateAuth()(tlsRequest(socketOf(true, der)), "edge-1");
  assert.ok(result.ok);
  assert.deepEqual(result.certificate, {
    serial: "7a1b2c",
    notAfter: new Date("2030-02-01T00:00:00Z"),
  });
  assert.equal(await result.revoked!(), false);
  assert.equal(
    kindOf(await certificateAuth()(tlsRequest(socketOf(true, der)), "edge-2")),
    "wrong_node",
  );
  assert.equal(
    kindOf(await certificateAuth()(tlsRequest(socketOf(false, der)), "edge-1")),
    "unauthenticated",
  );
});

Deno.test("hub mutual TLS: no certificate, none CN or two CNs is ambiguous, never a node", async () => {
  const none = certificateNode(socketOf(true));
  assert.equal(kindOf(none as never), "ambiguous_certificate");
  assert.deepEqual(commonNamesOf(undefined), []);
  assert.deepEqual(commonNamesOf(new Uint8Array(0)), []);
  assert.deepEqual(commonNamesOf(new Uint8Array([0x30, 0x00])), []);
  const noCn = await certificateDer([{ O: ["fleet"] }]);
  const twoCn = await certificateDer([{ CN: ["edge-1"] }, { CN: ["edge-2"] }]);
  assert.deepEqual(commonNamesOf(twoCn), ["edge-1", "edge-2"]);
  for (const der of [noCn, twoCn]) {
    for (const node of ["edge-1", "edge-2", ""]) {
      const result = await certificateAuth()(tlsRequest(socketOf(true, der)), node);
      assert.equal(kindOf(result), "ambiguous_certificate", node);
    }
  }
});

Deno.test("hub mutual TLS: a serial in the CRL and the node's standing decide, then and later", async () => {
  const der = await certificateDer([{ CN: ["edge-1"] }], "7a1b2c");
  const crl = new Set<string>();
  let standing: "ok" | "revoked" | "unknown" = "ok";
  const check: RevocationCheck = {
    isRevoked: (serial) => crl.has(serial),
    judge: (nodeId, serial) => {
      assert.deepEqual([nodeId, serial], ["edge-1", "7a1b2c"]);
      return Promise.resolve(standing);
    },
  };
  const auth = certificateAuth(check);
  const ask = () => auth(tlsRequest(socketOf(true, der)), "edge-1");
  const accepted = await ask();
  assert.ok(accepted.ok);
  assert.equal(await accepted.revoked!(), false);
  crl.add("7a1b2c"); // listed later, standing still ok: revoked
  assert.equal(await accepted.revoked!(), true);
  assert.equal(kindOf(await ask()), "node_revoked");
  crl.clear();
  standing = "unknown"; // the standing changes later: revoked
  assert.equal(await accepted.revoked!(), true);
  assert.equal(kindOf(await ask()), "unauthenticated");
  standing = "revoked";
  assert.equal(await accepted.revoked!(), true);
  assert.equal(kindOf(await ask()), "node_revoked");
});

// ---------------------------------------------------------------------------------------------
// api_auth.ts: the outsider gate and the node middleware

/**
 * A small api: the gate, then `/v1/x` (node from the query, the node middleware, a handler that
 * shows what the middleware kept) and the registration path, reached by any method.
 */
function apiApp(authenticate: NodeAuthenticator, open?: typeof REGISTER) {
  const app = new Hono<HubEnv>();
  app.use(outsiderGate(authenticate, open));
  app.all(
    "/v1/x",
    async (c, next) => {
      c.set("nodeId", c.req.query("node_id") ?? "");
      await next();
    },
    nodeAuth(authenticate),
    (c) => {
      const auth = c.var.auth;
      return c.json({ reached: true, certificate: auth?.ok ? auth.certificate ?? null : "none" });
    },
  );
  app.all(REGISTER.path, (c) => c.json({ reached: true }));
  return app;
}

/** What the api answers: status, error code (or "reached"), and the challenge header. */
async function askApi(
  app: Hono<HubEnv>,
  init: { path: string; method?: string; authorization?: string; socket?: TLSSocket },
) {
  const headers = init.authorization === undefined
    ? undefined
    : { authorization: init.authorization };
  const incoming = { socket: init.socket ?? socketOf(false), headers: headers ?? {} };
  const response = await app.fetch(
    new Request(`http://hub.test${init.path}`, { method: init.method ?? "GET", headers }),
    { requestId: "req-1", incoming, outgoing: {} },
  );
  const reply = await replyOf(response);
  assert.ok(reply, "an answer");
  const text = typeof reply.body === "string"
    ? reply.body
    : new TextDecoder().decode(reply.body as Uint8Array);
  const body = JSON.parse(text);
  return {
    status: reply.status,
    code: body.reached ? "reached" : body.error?.code,
    certificate: body.certificate,
    challenge: reply.headers?.["www-authenticate"],
  };
}

Deno.test("hub api token gate: members by token (any scheme case), outsiders one 404 whatever they send", async () => {
  const t = await tokensFolder();
  try {
    const token = "AZaz09._~+/-==";
    await t.write("edge-a.token", `${token}\n`);
    await t.write("edge-b.token", "b-token\n");
    const app = apiApp(t.auth());
    const x = "/v1/x?node_id=edge-a";
    assert.equal(
      (await askApi(app, { path: x, authorization: `Bearer ${token}` })).code,
      "reached",
    );
    assert.equal(
      (await askApi(app, { path: x, authorization: `bearer ${token}` })).code,
      "reached",
    );
    assert.equal(
      (await askApi(app, { path: x, authorization: `BEARER  ${token}` })).code,
      "reached",
    );
    for (
      const authorization of [
        undefined,
        "",
        "Bearer wrong-token",
        "Bearer b-token",
        `XBearer ${token}`,
        `Bearer ${token} junk`,
        `Basic ${token}`,
      ]
    ) {
      for (const method of ["GET", "POST"]) {
        const answer = await askApi(app, { path: x, method, authorization });
        assert.deepEqual(
          [answer.status, answer.code],
          [404, "route_not_allowed"],
          `${authorization}`,
        );
      }
    }
    // No open request: registration is shut to outsiders too.
    const register = await askApi(app, { path: REGISTER.path, method: "POST" });
    assert.deepEqual([register.status, register.code], [404, "route_not_allowed"]);
  } finally {
    await t.dispose();
  }
});

Deno.test("hub api token gate: a revoked token passes the gate and is told node_revoked with invalid_token", async () => {
  const t = await tokensFolder();
  try {
    await Deno.mkdir(`${t.dir}/revoked`);
    await t.write("revoked/edge-r.token", "old-token\n");
    const app = apiApp(t.auth());
    const answer = await askApi(app, {
      path: "/v1/x?node_id=edge-r",
      authorization: "Bearer old-token",
    });
    assert.deepEqual([answer.status, answer.code], [403, "node_revoked"]);
    assert.match(answer.challenge ?? "", /^Bearer error="invalid_token"/);
  } finally {
    await t.dispose();
  }
});

Deno.test("hub api: with registration open only POST /v1/nodes/register passes an outsider", async () => {
  const t = await tokensFolder();
  try {
    const app = apiApp(t.auth(), REGISTER);
    assert.equal((await askApi(app, { path: REGISTER.path, method: "POST" })).code, "reached");
    for (
      const [method, path] of [
        ["GET", REGISTER.path],
        ["PUT", REGISTER.path],
        ["POST", "/v1/x?node_id=edge-a"],
        ["GET", "/v1/x?node_id=edge-a"],
        ["POST", "/v1/nodes/renew"],
      ]
    ) {
      const answer = await askApi(app, { path, method });
      assert.deepEqual(
        [answer.status, answer.code],
        [404, "route_not_allowed"],
        `${method} ${path}`,
      );
    }
  } finally {
    await t.dispose();
  }
});

Deno.test("hub api certificate gate: a chained certificate is a member, kept for the route; refusals are the table's", async () => {
  const der = await certificateDer([{ CN: ["edge-1"] }], "7a1b2c");
  const app = apiApp(certificateAuth());
  const ok = await askApi(app, { path: "/v1/x?node_id=edge-1", socket: socketOf(true, der) });
  assert.equal(ok.code, "reached");
  assert.deepEqual(ok.certificate, { serial: "7a1b2c", notAfter: "2030-02-01T00:00:00.000Z" });
  const wrong = await askApi(app, { path: "/v1/x?node_id=edge-2", socket: socketOf(true, der) });
  assert.deepEqual([wrong.status, wrong.code], [403, "wrong_node"]);
  const outsider = await askApi(app, {
    path: "/v1/x?node_id=edge-1",
    socket: socketOf(false, der),
  });
  assert.deepEqual([outsider.status, outsider.code], [404, "route_not_allowed"]);
  const opened = apiApp(certificateAuth(), REGISTER);
  const register = await askApi(opened, {
    path: REGISTER.path,
    method: "POST",
    socket: socketOf(false),
  });
  assert.equal(register.code, "reached");
});

// ---------------------------------------------------------------------------------------------
// enrolment.ts: registration and renewal against a real CA folder

const DAY_MS = 86_400_000;

/** A node standing that, when armed, writes the node's revocation marker as an issue is noted. */
class RacingStanding extends NodeStanding {
  armed = false;
  override async noteIssue(
    entry: NodeEntry,
    issued: { serial: string; notAfter: Date; issuedAt: Date },
  ): Promise<void> {
    if (this.armed) {
      await writeRevokedMarker(this.files.revokedDir, {
        nodeId: entry.nodeId,
        incarnation: entry.incarnation,
        revokedAt: new Date().toISOString(),
      });
    }
    await super.noteIssue(entry, issued);
  }
  constructor(readonly files: CaFiles, crl: Set<string>, log: (line: string) => void) {
    super({ files, crl: { isRevoked: (serial) => crl.has(serial) }, log });
  }
}

/** A CA, its secrets, a standing and an enrolment with `limits`; `lines` is the hub's log. */
async function enrolmentRig(limits: Partial<Omit<CaSettings, "files">> = {}) {
  const parent = await Deno.makeTempDir({ prefix: "portcullis-kills-enrol-" });
  const files = await initCa(`${parent}/ca`, { names: ["127.0.0.1"] });
  const issuer = await loadIssuer(files.dir);
  const lines: string[] = [];
  const log = (line: string) => lines.push(line);
  const crl = new Set<string>();
  const standing = new RacingStanding(files, crl, log);
  const settings: CaSettings = {
    files,
    lifetimeDays: 30,
    renewBeforeDays: 30,
    renewIntervalMs: 0,
    retryWindowMs: 60_000,
    ...limits,
  };
  const enrolment = new Enrolment({
    issuer,
    secrets: new NodeSecrets(files.secretsDir, { log }),
    standing,
    limits: settings,
    log,
  });
  return {
    files,
    lines,
    crl,
    standing,
    enrolment,
    /** A secret for `nodeId` (type, incarnation) and a fresh key's request. */
    async provision(nodeId: string, type: "edge" | "door" = "edge", incarnation = 1) {
      const { secret } = await addNodeSecret(files.secretsDir, nodeId, type, incarnation);
      const { csrPem } = await makeNodeKeyAndCsr(nodeId);
      return { node_id: nodeId, node_type: type as string, csr: csrPem, secret };
    },
    /** Status, error code, body and Retry-After of an enrolment answer. */
    read(reply: Reply) {
      const body = JSON.parse(reply.body as string);
      return {
        status: reply.status,
        code: body.error?.code as string | undefined,
        body,
        retryAfter: reply.headers?.["retry-after"],
      };
    },
    said(pattern: RegExp): boolean {
      return lines.some((line) => pattern.test(line));
    },
    dispose: () => Deno.remove(parent, { recursive: true }),
  };
}

/** Runs `task` with `Date.now()` fixed at `now` (the renewal waits read that clock). */
async function atTime<T>(now: number, task: () => Promise<T>): Promise<T> {
  const real = Date.now;
  Date.now = () => now;
  try {
    return await task();
  } finally {
    Date.now = real;
  }
}

Deno.test("hub enrolment: a registration is answered, recorded and known at once; asked again gets the same certificate", async () => {
  const rig = await enrolmentRig();
  try {
    const body = await rig.provision("edge-1");
    const first = rig.read(await rig.enrolment.register(body, "r1"));
    assert.equal(first.status, 200, JSON.stringify(first.body));
    const serial = first.body.serial as string;
    assert.ok(
      rig.said(new RegExp(`registered edge edge-1 \\(certificate ${serial}, incarnation 1`)),
    );
    assert.equal((await readNodeEntry(rig.files.nodesDir, "edge-1"))?.incarnation, 1);
    // Known to the standing from the answer on: the node's first poll is not refused.
    assert.equal(await rig.standing.judge("edge-1", serial), "ok");
    // Asked again with the same secret and key: the same certificate, said so.
    const again = rig.read(await rig.enrolment.register(body, "r2"));
    assert.equal(again.status, 200, JSON.stringify(again.body));
    assert.equal(again.body.certificate, first.body.certificate);
    assert.ok(
      rig.said(
        new RegExp(`registration of edge-1 asked again with the same key: certificate ${serial}`),
      ),
    );
    // Another key, or another type, with the spent secret: refused.
    const otherKey = { ...body, csr: (await makeNodeKeyAndCsr("edge-1")).csrPem };
    assert.equal(
      rig.read(await rig.enrolment.register(otherKey, "r3")).code,
      "registration_refused",
    );
    assert.equal(
      rig.read(await rig.enrolment.register({ ...body, node_type: "door" }, "r4")).code,
      "registration_refused",
    );
    assert.ok(rig.said(/spent by a registration with another key \(or type\)/));
    // Listed in the CRL, then: refused too.
    rig.crl.add(serial);
    assert.equal(rig.read(await rig.enrolment.register(body, "r5")).code, "registration_refused");
    rig.crl.clear();
    assert.equal(rig.read(await rig.enrolment.register(body, "r6")).status, 200);
    // Revoked, then: refused.
    await writeRevokedMarker(rig.files.revokedDir, {
      nodeId: "edge-1",
      incarnation: 1,
      revokedAt: new Date().toISOString(),
    });
    assert.equal(rig.read(await rig.enrolment.register(body, "r7")).code, "registration_refused");
    assert.ok(rig.said(/the node was revoked or provisioned again since/));
  } finally {
    await rig.dispose();
  }
});

Deno.test("hub enrolment: without a retry window a registration asked again is refused", async () => {
  const rig = await enrolmentRig({ retryWindowMs: 0 });
  try {
    const body = await rig.provision("edge-1");
    assert.equal(rig.read(await rig.enrolment.register(body, "r1")).status, 200);
    // Nothing of the registration is kept: no record holding its certificate in secrets/.
    assert.deepEqual(spentRecords(rig.files.secretsDir), []);
    assert.equal(rig.read(await rig.enrolment.register(body, "r2")).code, "registration_refused");
  } finally {
    await rig.dispose();
  }
  const brief = await enrolmentRig({ retryWindowMs: 1 });
  try {
    assert.equal(
      rig.read(await brief.enrolment.register(await brief.provision("edge-1"), "r1")).status,
      200,
    );
    assert.deepEqual(spentRecords(brief.files.secretsDir), ["edge-1.spent"]);
  } finally {
    await brief.dispose();
  }
});

/** The spent records in a secrets folder. */
function spentRecords(dir: string): string[] {
  return [...Deno.readDirSync(dir)].map((entry) => entry.name).filter((name) =>
    name.endsWith(".spent")
  );
}

Deno.test("hub enrolment: wrong secret, wrong type, bad id, bad request are refused alike, the log says which", async () => {
  const rig = await enrolmentRig();
  try {
    const body = await rig.provision("edge-1");
    const wrong = rig.read(await rig.enrolment.register({ ...body, secret: "x".repeat(43) }, "r1"));
    assert.deepEqual([wrong.status, wrong.code], [403, "registration_refused"]);
    assert.ok(rig.said(/registration of node "edge-1" refused: no unspent secret matches/));
    // The secret for a door, asked as an edge: refused, and the secret is spent.
    const door = await rig.provision("door-1", "door");
    const asEdge = rig.read(await rig.enrolment.register({ ...door, node_type: "edge" }, "r2"));
    assert.equal(asEdge.code, "registration_refused");
    assert.ok(rig.said(/the secret was made for a door, not a "edge"/));
    assert.equal(rig.read(await rig.enrolment.register(door, "r3")).code, "registration_refused");
    // A request naming another node: refused, the secret spent.
    const edge2 = await rig.provision("edge-2");
    const foreign = { ...edge2, csr: (await makeNodeKeyAndCsr("edge-3")).csrPem };
    assert.equal(
      rig.read(await rig.enrolment.register(foreign, "r4")).code,
      "registration_refused",
    );
    assert.ok(
      rig.said(/registration of node "edge-2" refused: csr_subject: .*\(the secret is spent\)/),
    );
    assert.equal(await readNodeEntry(rig.files.nodesDir, "edge-2"), undefined);
    // An id that is no node id: the log quotes its first 64 characters.
    const long = "a" + "b".repeat(62) + "c" + "d".repeat(36);
    const bad = rig.read(await rig.enrolment.register({ ...body, node_id: long }, "r5"));
    assert.equal(bad.code, "registration_refused");
    assert.ok(
      rig.lines.some((line) =>
        line.includes(`registration of node ${JSON.stringify(long.slice(0, 64))} refused`)
      ),
    );
  } finally {
    await rig.dispose();
  }
});

Deno.test("hub enrolment: a revoked or registered node registers only into a later incarnation", async () => {
  const rig = await enrolmentRig();
  try {
    const revokedAt = new Date().toISOString();
    await writeRevokedMarker(rig.files.revokedDir, { nodeId: "edge-r", incarnation: 1, revokedAt });
    const same = await rig.provision("edge-r", "edge", 1);
    assert.equal(rig.read(await rig.enrolment.register(same, "r1")).code, "registration_refused");
    assert.ok(rig.said(/node "edge-r" refused: the node is revoked/));
    await writeRevokedMarker(rig.files.revokedDir, { nodeId: "edge-n", incarnation: 1, revokedAt });
    const next = await rig.provision("edge-n", "edge", 2);
    assert.equal(rig.read(await rig.enrolment.register(next, "r2")).status, 200);

    const registeredAt = revokedAt;
    await writeNodeEntry(rig.files.nodesDir, {
      nodeId: "edge-e",
      nodeType: "edge",
      incarnation: 1,
      registeredAt,
    });
    const twice = await rig.provision("edge-e", "edge", 1);
    assert.equal(rig.read(await rig.enrolment.register(twice, "r3")).code, "registration_refused");
    assert.ok(rig.said(/node "edge-e" refused: the node is registered already \(incarnation 1\)/));
    await writeNodeEntry(rig.files.nodesDir, {
      nodeId: "edge-f",
      nodeType: "edge",
      incarnation: 1,
      registeredAt,
    });
    const later = await rig.provision("edge-f", "edge", 2);
    assert.equal(rig.read(await rig.enrolment.register(later, "r4")).status, 200);
  } finally {
    await rig.dispose();
  }
});

Deno.test("hub enrolment: a node revoked while it registers or renews gets no certificate", async () => {
  const rig = await enrolmentRig();
  try {
    const body = await rig.provision("edge-1");
    rig.standing.armed = true;
    const registered = rig.read(await rig.enrolment.register(body, "r1"));
    assert.equal(registered.code, "registration_refused");
    assert.ok(rig.said(/revoked while it registered; certificate [0-9a-f]+ withheld/));

    rig.standing.armed = false;
    const edge2 = rig.read(await rig.enrolment.register(await rig.provision("edge-2"), "r2"));
    assert.equal(edge2.status, 200);
    const presented = { serial: edge2.body.serial, notAfter: new Date(edge2.body.not_after) };
    const csr = (await makeNodeKeyAndCsr("edge-2")).csrPem;
    rig.standing.armed = true;
    const renewed = rig.read(
      await rig.enrolment.renew({ node_id: "edge-2", csr }, "r3", "edge-2", presented),
    );
    assert.equal(renewed.code, "node_revoked");
    assert.ok(
      rig.said(/renewal for edge-2 refused: revoked meanwhile; certificate [0-9a-f]+ withheld/),
    );
  } finally {
    await rig.dispose();
  }
});

Deno.test("hub enrolment: renewal is for the node itself, registered, unrevoked, of its incarnation, with a good request", async () => {
  const rig = await enrolmentRig();
  try {
    const answer = rig.read(await rig.enrolment.register(await rig.provision("edge-1"), "r1"));
    const presented = { serial: answer.body.serial, notAfter: new Date(answer.body.not_after) };
    const csr = (await makeNodeKeyAndCsr("edge-1")).csrPem;
    const renew = async (
      nodeId: string,
      bodyNode: string,
      shown: typeof presented | null = presented,
      request = csr,
    ) =>
      rig.read(
        await rig.enrolment.renew(
          { node_id: bodyNode, csr: request },
          "r",
          nodeId,
          shown ?? undefined,
        ),
      );
    assert.equal((await renew("edge-1", "edge-2")).code, "renewal_refused");
    assert.ok(
      rig.said(/renewal for edge-1 refused: the body names another node, or no certificate/),
    );
    assert.equal((await renew("edge-1", "edge-1", null)).code, "renewal_refused");
    assert.equal((await renew("edge-9", "edge-9")).code, "renewal_refused");
    assert.ok(rig.said(/renewal for edge-9 refused: not a node the CA registered/));
    assert.equal(
      (await renew("edge-1", "edge-1", { ...presented, serial: "7f".repeat(16) })).code,
      "node_revoked",
    );
    assert.ok(rig.said(/renewal for edge-1 refused: certificate (7f)+ is not of its incarnation/));
    const foreign = (await makeNodeKeyAndCsr("edge-2")).csrPem;
    assert.equal((await renew("edge-1", "edge-1", presented, foreign)).code, "renewal_refused");
    assert.ok(rig.said(/renewal for edge-1 refused: csr_subject/));
    const renewed = await renew("edge-1", "edge-1");
    assert.equal(renewed.status, 200, JSON.stringify(renewed.body));
    assert.ok(rig.said(new RegExp(`renewed edge-1 \\(certificate ${renewed.body.serial}, until`)));
    await writeRevokedMarker(rig.files.revokedDir, {
      nodeId: "edge-1",
      incarnation: 1,
      revokedAt: new Date().toISOString(),
    });
    assert.equal((await renew("edge-1", "edge-1")).code, "node_revoked");
    assert.ok(rig.said(/renewal for edge-1 refused: the node is revoked$/));
  } finally {
    await rig.dispose();
  }
});

Deno.test("hub enrolment: renewal opens exactly ca.renew_before_days before the end; Retry-After rounds up", async () => {
  const rig = await enrolmentRig({ renewBeforeDays: 10 });
  try {
    await rig.enrolment.register(await rig.provision("edge-1"), "r1");
    const answer = rig.read(await rig.enrolment.register(await rig.provision("edge-2"), "r2"));
    const serial = answer.body.serial as string;
    const csr = (await makeNodeKeyAndCsr("edge-2")).csrPem;
    const now = Date.now();
    const renewAt = (offsetMs: number) =>
      atTime(now, async () =>
        rig.read(
          await rig.enrolment.renew({ node_id: "edge-2", csr }, "r", "edge-2", {
            serial,
            notAfter: new Date(now + 10 * DAY_MS + offsetMs),
          }),
        ));
    for (const [offset, retry] of [[1, "1"], [1000, "1"], [1001, "2"]] as const) {
      const early = await renewAt(offset);
      assert.deepEqual([early.status, early.code, early.retryAfter], [
        429,
        "renewal_too_early",
        retry,
      ], `${offset}`);
    }
    assert.ok(
      rig.said(/renewal for edge-2 too early: 10 days left, more than ca.renew_before_days/),
    );
    assert.equal((await renewAt(0)).status, 200);
  } finally {
    await rig.dispose();
  }
});

Deno.test("hub enrolment: one renewal per ca.renew_interval_seconds, counted from the last issue", async () => {
  const rig = await enrolmentRig({ renewIntervalMs: 60_000 });
  try {
    const answer = rig.read(await rig.enrolment.register(await rig.provision("edge-1"), "r1"));
    const presented = { serial: answer.body.serial, notAfter: new Date(answer.body.not_after) };
    const csr = (await makeNodeKeyAndCsr("edge-1")).csrPem;
    const issued = rig.standing.lastIssuedAt("edge-1");
    assert.ok(issued > 0);
    const renewAt = (since: number) =>
      atTime(
        issued + since,
        async () =>
          rig.read(await rig.enrolment.renew({ node_id: "edge-1", csr }, "r", "edge-1", presented)),
      );
    for (
      const [since, retry, said] of [[999, "60", 0], [1000, "59", 1], [59_999, "1", 59]] as const
    ) {
      const early = await renewAt(since);
      assert.deepEqual([early.status, early.retryAfter], [429, retry], `${since}`);
      assert.ok(
        rig.said(
          new RegExp(`too early: issued one ${said} s ago \\(ca.renew_interval_seconds\\)$`),
        ),
        `${since}`,
      );
    }
    assert.equal((await renewAt(60_000)).status, 200);
    // That renewal counts: the next is early again, from its issue on.
    assert.equal((await renewAt(60_001)).status, 429);
  } finally {
    await rig.dispose();
  }
});

// ---------------------------------------------------------------------------------------------
// fleet_trust.ts

/** The parts of a hub config fleet trust reads. */
function fleetConfig(files?: CaFiles): HubConfig {
  const limits = files
    ? { files, lifetimeDays: 30, renewBeforeDays: 10, renewIntervalMs: 0, retryWindowMs: 0 }
    : undefined;
  return { file: "/etc/hub.yaml", ca: limits, revocationReloadMs: 60_000 } as unknown as HubConfig;
}

Deno.test("hub fleet trust: without a CA no enrolment; with one, its CRL is loaded at boot and registration is on", async () => {
  const plain = await loadFleetTrust(fleetConfig(), () => {});
  assert.equal(plain.enrolment, undefined);
  assert.equal(plain.revocations.isRevoked("7a"), false);
  plain.revocations.stop();
  const parent = await Deno.makeTempDir({ prefix: "portcullis-kills-fleet-" });
  try {
    const files = await initCa(`${parent}/ca`, { names: ["127.0.0.1"] });
    const issuer = await loadIssuer(files.dir);
    await writeCrl(issuer, [{ serial: "7a1b2c", at: new Date() }]);
    const trust = await loadFleetTrust(fleetConfig(files), () => {});
    assert.ok(trust.enrolment);
    assert.equal(trust.revocations.isRevoked("7a1b2c"), true);
    assert.equal(trust.revocations.isRevoked("7a1b2d"), false);
    trust.revocations.stop();
  } finally {
    await Deno.remove(parent, { recursive: true });
  }
});

Deno.test("hub fleet trust: a CA with even one flat issued record refuses the boot, naming it and migrate-ca", async () => {
  const parent = await Deno.makeTempDir({ prefix: "portcullis-kills-fleet-" });
  try {
    const files = await initCa(`${parent}/ca`, { names: ["127.0.0.1"] });
    await Deno.writeTextFile(`${files.issuedDir}/7a1b2c.json`, "{}\n");
    await assert.rejects(
      () => loadFleetTrust(fleetConfig(files), () => {}),
      (error: Error) =>
        error instanceof BootError &&
        error.message.includes(
          `1 issued record(s) in the old flat layout ("${files.issuedDir}/7a1b2c.json")`,
        ) &&
        error.message.includes(`portcullis hub migrate-ca /etc/hub.yaml`),
    );
    await Deno.writeTextFile(`${files.issuedDir}/7a1b2d.json`, "{}\n");
    await assert.rejects(
      () => loadFleetTrust(fleetConfig(files), () => {}),
      (error: Error) =>
        error.message.includes(
          `2 issued record(s) in the old flat layout ("${files.issuedDir}/7a1b2c.json")`,
        ),
    );
  } finally {
    await Deno.remove(parent, { recursive: true });
  }
});
