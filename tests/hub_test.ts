/**
 * The hub role in one process: its config rules (one way to authenticate, health on loopback,
 * listeners distinct), its permission set, and its config stream over real sockets — who is let in,
 * what a snapshot, a delta and a held poll carry, and what an invalid change looks like to a node.
 *
 * @module
 */
import assert from "node:assert/strict";
import { Buffer } from "node:buffer";
import { stringify } from "yaml";
import { formatFlags } from "../src/boot/flags.ts";
import { hashFileSet, readFileSet } from "../src/config/file_set.ts";
import { ConfigError, formatPath } from "../src/config/problems.ts";
import { parseYaml } from "../src/config/yaml_file.ts";
import { resolveHubConfig } from "../src/hub/config.ts";
import { hubGrants } from "../src/hub/grants.ts";
import type { StreamAnswer } from "../src/hub/feed.ts";
import { TestPki } from "./fixtures/certs.ts";
import { configErrorOf } from "./fixtures/config_files.ts";
import { siteYaml, startTestHub, type TestHub } from "./fixtures/hub_in_process.ts";
import { json, request } from "./fixtures/http_client.ts";
import { waitFor } from "./fixtures/in_process.ts";

const BASE = {
  role: "hub",
  node_id: "hub-1",
  runtime_dir: "runtime",
  api: { listen: [{ hostname: "127.0.0.1", port: 9443 }], tokens_dir: "tokens" },
  health: { listen: [{ hostname: "127.0.0.1", port: 9444 }] },
};

function resolveText(config: Record<string, unknown>) {
  const parsed = parseYaml("/etc/portcullis/hub.yaml", stringify(config));
  if (Array.isArray(parsed)) throw new Error("unparsable");
  return resolveHubConfig(parsed);
}

async function problemsOf(config: Record<string, unknown>): Promise<string[]> {
  const error = await configErrorOf(Promise.resolve().then(() => resolveText(config)), "accepted");
  return error.problems.map((p) => `${p.file} ${formatPath(p.path)}: ${p.message}`);
}

Deno.test("hub config: nodes must authenticate one way — tokens or mutual TLS, never neither or both", async () => {
  const neither = await problemsOf({ ...BASE, api: { listen: BASE.api.listen } });
  assert.equal(neither.length, 1);
  assert.match(neither[0], /^\/etc\/portcullis\/hub\.yaml api: Nodes must authenticate/);
  const tls = { cert_file: "hub.crt", key_file: "hub.key", client_ca_file: "ca.crt" };
  const both = await problemsOf({ ...BASE, api: { ...BASE.api, tls } });
  assert.deepEqual(both, [
    "/etc/portcullis/hub.yaml api.tokens_dir: With api.tls nodes authenticate by certificate; drop tokens_dir",
  ]);
});

Deno.test("hub config: health must be loopback and every listener its own socket", async () => {
  const problems = await problemsOf({
    ...BASE,
    health: { listen: [{ hostname: "0.0.0.0", port: 9443 }] },
  });
  assert.equal(problems.length, 2, problems.join("\n"));
  const [overlap, loopback] = problems;
  assert.match(loopback, /health\.listen\[0\]\.hostname: The health listener .* loopback/);
  assert.match(overlap, /health\.listen\[0\]: Overlaps api\.listen\[0\] \(127\.0\.0\.1:9443\)/);
});

Deno.test("hub config: unknown keys and a wrong role are refused with the field named", async () => {
  const problems = await problemsOf({ ...BASE, role: "edge", stream: { hold: 5 } });
  assert.ok(problems.some((p) => /role: Expected "hub"/.test(p)), problems.join("\n"));
  assert.ok(problems.some((p) => /stream\.hold: Unknown field/.test(p)), problems.join("\n"));
});

Deno.test("hub flags: its listeners, its config, runtime folder and tokens — no write, no outbound", () => {
  const config = resolveText(BASE);
  assert.equal(
    formatFlags(hubGrants(config)),
    "--allow-net=127.0.0.1:9443,127.0.0.1:9444 " +
      "--allow-read=/etc/portcullis/hub.yaml,/etc/portcullis/runtime,/etc/portcullis/tokens," +
      "/etc/hosts --allow-sys=hostname,networkInterfaces --ignore-env=LOG_STREAM,LOG_TOKENS",
  );
  const tls = { cert_file: "tls/hub.crt", key_file: "tls/hub.key", client_ca_file: "tls/ca.crt" };
  const mtls = resolveText({ ...BASE, api: { listen: BASE.api.listen, tls } });
  assert.match(
    formatFlags(hubGrants(mtls)),
    /--allow-read=\S*runtime,\/etc\/portcullis\/tls\/hub\.crt,\/etc\/portcullis\/tls\/hub\.key,\/etc\/portcullis\/tls\/ca\.crt,\/etc\/hosts /,
  );
});

Deno.test("a hub refuses to boot on an invalid runtime folder, naming the file and field", async () => {
  const error = await configErrorOf(
    startTestHub({
      files: { "bad.test.yaml": "host: bad.test\nroutes: [{ match: { path: 5 } }]\n" },
    }),
    "an invalid folder booted",
  );
  assert.ok(error instanceof ConfigError);
  assert.ok(error.problems.some((p) => p.file.endsWith("bad.test.yaml")), error.message);
});

/** One stream poll over a real socket. */
async function poll(
  t: TestHub,
  query: string,
  headers: [string, string][] = [],
): Promise<{ status: number; answer: StreamAnswer & { error?: { code: string } } }> {
  const response = await request(t.apiPort, { path: `/v1/config/stream?${query}`, headers });
  return { status: response.status, answer: json(response) };
}

const bearer = (token: string): [string, string][] => [["Authorization", `Bearer ${token}`]];

/** Takes edge-a's snapshot, then sends a poll that the hub holds (it is current). */
async function holdAfterSnapshot(t: TestHub) {
  const token = await t.token("edge-a");
  const first = (await poll(t, "node_id=edge-a", bearer(token))).answer;
  const held = poll(t, `node_id=edge-a&have=${first.hash}`, bearer(token));
  await waitFor(() => t.hub.feed.waiting, (n) => n === 1);
  return { token, first, held };
}

function decode(files: Record<string, string>): Record<string, string> {
  return Object.fromEntries(
    Object.entries(files).map(([name, data]) => [name, Buffer.from(data, "base64").toString()]),
  );
}

/**
 * The hub's one answer to a caller it cannot authenticate, byte for byte: an unknown path's, the
 * same for every node and credential but for the request id, which is the one in its
 * `X-Request-Id` header (hub_outsider_test.ts: the same for every path and method too).
 */
const unauthenticated = (requestId: string) =>
  JSON.stringify({
    error: {
      code: "route_not_allowed",
      message: "No such route on this listener",
      request_id: requestId,
    },
  });

Deno.test("hub stream: every node × credential pair that is not the node's own token gets the same 404", async () => {
  const t = await startTestHub();
  try {
    const tokens = { "edge-a": await t.token("edge-a"), "edge-b": await t.token("edge-b") };
    const right = tokens["edge-a"];
    // Each credential, as an Authorization header (none: no header at all).
    const credentials: Record<string, [string, string][]> = {
      "no credential": [],
      "a wrong token": bearer("not-the-token"),
      "the right token of edge-a": bearer(right),
      "the other node's token (edge-b)": bearer(tokens["edge-b"]),
      "edge-a's token less its last character": bearer(right.slice(0, -1)),
      "edge-a's token and one character more": bearer(`${right}x`),
      "edge-a's token without the Bearer scheme": [["Authorization", right]],
      "an empty bearer": [["Authorization", "Bearer "]],
    };
    const nodes = { "known node edge-a": "edge-a", "unknown node edge-zz": "edge-zz" };
    const seen: string[] = [];
    for (const [nodeLabel, node] of Object.entries(nodes)) {
      for (const [credentialLabel, headers] of Object.entries(credentials)) {
        const pair = `${nodeLabel} × ${credentialLabel}`;
        const response = await request(t.apiPort, {
          path: `/v1/config/stream?node_id=${node}&wait=0`,
          headers,
        });
        const accepted = node === "edge-a" && credentialLabel === "the right token of edge-a";
        if (accepted) {
          assert.equal(response.status, 200, `${pair}: ${response.body}`);
          assert.equal(json<StreamAnswer>(response).type, "snapshot", pair);
        } else {
          assert.equal(response.status, 404, `${pair}: ${response.body}`);
          const requestId = response.headers["x-request-id"];
          assert.match(requestId, /^[0-9a-f-]{36}$/, `${pair}: a fresh request id`);
          assert.equal(response.body, unauthenticated(requestId), pair);
          assert.equal(response.headers["content-type"], "application/json", pair);
        }
        seen.push(`${pair}: ${response.status}`);
      }
    }
    assert.equal(seen.filter((line) => line.endsWith(": 200")).length, 1, seen.join("\n"));
    const invalid = await poll(t, "node_id=../x", bearer(right));
    assert.equal(invalid.status, 404, "a node id that is no file name authenticates nobody");
    assert.equal(invalid.answer.error?.code, "route_not_allowed");
    assert.deepEqual([...t.hub.nodes.keys()], ["edge-a"], "only the authenticated poll is a node");
    assert.equal(t.hub.nodes.get("edge-a")!.polls, 1);
  } finally {
    await t.dispose();
  }
});

Deno.test("hub stream: the first answer is a snapshot of every file, hashed as the folder is", async () => {
  const t = await startTestHub();
  try {
    await t.write("globals.yaml", "policies: {}\n");
    await Deno.mkdir(`${t.runtimeDir}/pages`);
    await Deno.writeTextFile(`${t.runtimeDir}/pages/home.html`, "<p>home</p>");
    await t.hub.reload();
    const token = await t.token("edge-a");
    const { status, answer } = await poll(t, "node_id=edge-a", bearer(token));
    assert.equal(status, 200);
    assert.equal(answer.type, "snapshot");
    if (answer.type !== "snapshot") return;
    assert.deepEqual(decode(answer.files), {
      "demo.test.yaml": siteYaml("demo.test", "demo v1\n"),
      "globals.yaml": "policies: {}\n",
      "pages/home.html": "<p>home</p>",
    });
    assert.equal(answer.hash, await hashFileSet((await readFileSet(t.runtimeDir)).files));
    assert.equal(answer.hub.last_rejected, null);
    const nodes = await request(t.healthPort, { path: "/v1/nodes" });
    const [node] = json<{ nodes: { node_id: string; polls: number }[] }>(nodes).nodes;
    assert.equal(node.node_id, "edge-a");
    assert.equal(node.polls, 1);
  } finally {
    await t.dispose();
  }
});

Deno.test("hub stream: a held poll is answered with a delta as soon as the folder changes", async () => {
  const t = await startTestHub({ edit: (c) => c.stream.hold_ms = 10_000 });
  try {
    const { token, first, held } = await holdAfterSnapshot(t);
    const started = Date.now();
    await t.write("new.test.yaml", siteYaml("new.test", "new\n"));
    await Deno.remove(`${t.runtimeDir}/demo.test.yaml`);
    const { status, answer } = await held;
    assert.ok(Date.now() - started < 5000, "answered on change, not at the end of the hold");
    assert.equal(status, 200);
    assert.equal(answer.type, "delta");
    if (answer.type !== "delta") return;
    assert.equal(answer.from, first.hash);
    assert.notEqual(answer.hash, first.hash);
    // The watch may publish the write and the removal as one generation or as two: when the
    // first delta does not hold both, the next generation (within 5 s) must bring the rest.
    const deltas = [answer];
    const has = (test: (delta: StreamAnswer & { type: "delta" }) => boolean) =>
      deltas.some((delta) => delta.type === "delta" && test(delta));
    const both = () =>
      has((d) => "new.test.yaml" in d.changed) && has((d) => d.removed.includes("demo.test.yaml"));
    if (!both()) {
      const last = answer.hash;
      const next = await waitFor(
        () => poll(t, `node_id=edge-a&have=${last}&wait=0`, bearer(token)),
        ({ answer }) => answer.hash !== last,
        5000,
      );
      assert.equal(next.status, 200);
      assert.equal(next.answer.type, "delta", `a delta from ${last}`);
      deltas.push(next.answer);
    }
    const changed: Record<string, string> = {};
    const removed: string[] = [];
    let from = first.hash;
    for (const delta of deltas) {
      if (delta.type !== "delta") return assert.fail(`expected a delta, got ${delta.type}`);
      assert.equal(delta.from, from, "each delta starts where the last one ended");
      from = delta.hash;
      Object.assign(changed, decode(delta.changed));
      removed.push(...delta.removed);
    }
    assert.deepEqual(changed, { "new.test.yaml": siteYaml("new.test", "new\n") });
    assert.deepEqual(removed, ["demo.test.yaml"]);
    assert.equal(from, t.hub.store.current.hash, "the last delta ends at the hub's current set");
  } finally {
    await t.dispose();
  }
});

Deno.test("hub stream: an invalid change wakes held polls with the rejection; the set stays", async () => {
  const t = await startTestHub({ edit: (c) => c.stream.hold_ms = 10_000 });
  try {
    const { first, held } = await holdAfterSnapshot(t);
    await t.write(
      "bad.test.yaml",
      "host: bad.test\nroutes:\n  - match: { path: / }\n    respond: { status: 999 }\n",
    );
    const { answer } = await held;
    assert.equal(answer.type, "current");
    assert.equal(answer.hash, first.hash);
    const rejected = answer.hub.last_rejected!;
    assert.ok(rejected, "the rejection travels with the answer");
    assert.deepEqual(
      rejected.problems.map((p) => [p.file.split("/").pop(), p.path, p.value]),
      [["bad.test.yaml", "routes[0].respond.status", 999]],
    );
    const reload = await request(t.healthPort, { path: "/v1/config/reload", method: "POST" });
    assert.equal(reload.status, 422);
    assert.equal(json<{ generation: number }>(reload).generation, 1);
    assert.equal(rejected.superseded, false);
    await Deno.remove(`${t.runtimeDir}/bad.test.yaml`);
    const fixed = await request(t.healthPort, { path: "/v1/config/reload", method: "POST" });
    assert.equal(fixed.status, 200);
    const view = json<{ outcome: string; last_rejected: { superseded: boolean } }>(fixed);
    assert.equal(view.outcome, "unchanged");
    assert.equal(view.last_rejected.superseded, true, "the record stays, marked as past");
  } finally {
    await t.dispose();
  }
});

Deno.test("hub stream: a node current with the hub is held, then told `current`", async () => {
  const t = await startTestHub({ edit: (c) => c.stream.hold_ms = 300 });
  try {
    const token = await t.token("edge-a");
    const first = (await poll(t, "node_id=edge-a", bearer(token))).answer;
    const started = Date.now();
    const { answer } = await poll(t, `node_id=edge-a&have=${first.hash}`, bearer(token));
    assert.ok(Date.now() - started >= 250, "held for the hold time");
    assert.equal(answer.type, "current");
    assert.equal(answer.hash, first.hash);
    const now = await poll(t, `node_id=edge-a&have=${first.hash}&wait=0`, bearer(token));
    assert.equal(now.answer.type, "current");
  } finally {
    await t.dispose();
  }
});

Deno.test("hub stream: a hash older than the kept history gets a snapshot, a kept one a delta", async () => {
  const t = await startTestHub({ edit: (c) => c.stream.history = 2 });
  try {
    const token = await t.token("edge-a");
    const hashes = [t.hub.store.current.hash];
    for (const version of ["v2", "v3"]) {
      await t.write("demo.test.yaml", siteYaml("demo.test", `demo ${version}\n`));
      await t.hub.reload();
      hashes.push(t.hub.store.current.hash);
    }
    assert.equal(new Set(hashes).size, 3);
    const old = await poll(t, `node_id=edge-a&have=${hashes[0]}&wait=0`, bearer(token));
    assert.equal(old.answer.type, "snapshot");
    const kept = await poll(t, `node_id=edge-a&have=${hashes[1]}&wait=0`, bearer(token));
    assert.equal(kept.answer.type, "delta");
    const before = t.hub.store.current.files!;
    await t.write("other.test.yaml", siteYaml("other.test", "other\n"));
    await t.hub.reload();
    const after = t.hub.store.current.files!;
    assert.notEqual(after, before);
    assert.equal(
      after.get("demo.test.yaml"),
      before.get("demo.test.yaml"),
      "unchanged bytes shared",
    );
  } finally {
    await t.dispose();
  }
});

Deno.test("hub errors use the edge's envelope and keep a valid inbound X-Request-Id", async () => {
  const t = await startTestHub();
  try {
    const refused = await request(t.healthPort, {
      path: "/v1/config/stream",
      headers: [["X-Request-Id", "trace-7"]],
    });
    assert.equal(refused.status, 404);
    assert.equal(refused.headers["x-request-id"], "trace-7");
    assert.equal(
      refused.body,
      JSON.stringify({
        error: {
          code: "route_not_allowed",
          message: "No such route on this listener",
          request_id: "trace-7",
        },
      }),
    );
    const post = await request(t.apiPort, {
      path: "/v1/config/stream?node_id=edge-a",
      method: "POST",
      headers: bearer(await t.token("edge-a")),
    });
    assert.equal(post.status, 405);
    assert.equal(json<{ error: { code: string } }>(post).error.code, "method_not_allowed");
    assert.equal(
      json<{ error: { request_id: string } }>(post).error.request_id,
      post.headers["x-request-id"],
    );
  } finally {
    await t.dispose();
  }
});

Deno.test("hub listeners answer only their own routes; `nodes` limits who may follow", async () => {
  const t = await startTestHub({ edit: (c) => c.api.nodes = ["edge-a"] });
  try {
    const onApi = await request(t.apiPort, { path: "/v1/config" });
    assert.equal(onApi.status, 404);
    assert.equal(json<{ error: { code: string } }>(onApi).error.code, "route_not_allowed");
    const onHealth = await request(t.healthPort, { path: "/v1/config/stream?node_id=edge-a" });
    assert.equal(onHealth.status, 404);
    assert.equal((await request(t.apiPort, { path: "/healthz" })).status, 404, "the health's");
    assert.equal((await request(t.healthPort, { path: "/healthz" })).status, 200);
    const token = await t.token("edge-b");
    const outsider = await poll(t, "node_id=edge-b", bearer(token));
    assert.equal(outsider.status, 403);
    assert.equal(outsider.answer.error?.code, "node_not_allowed");
  } finally {
    await t.dispose();
  }
});

Deno.test("hub mutual TLS: a node's certificate must chain to the client CA and name that node", async () => {
  const pki = await TestPki.create();
  const stranger = await TestPki.create();
  const caFile = `${pki.dir}/ca.crt`;
  await Deno.writeTextFile(caFile, pki.ca.certPem);
  const server = await pki.issue("hub.test", { altNames: ["127.0.0.1"] });
  const edgeA = await pki.issue("edge-a");
  const forged = await stranger.issue("edge-a");
  const t = await startTestHub({
    edit: (c) => {
      delete c.api.tokens_dir;
      c.api.tls = { cert_file: server.certFile, key_file: server.keyFile, client_ca_file: caFile };
    },
  });
  const clientOf = (leaf: { certPem: string; keyPem: string }) =>
    Deno.createHttpClient({ caCerts: [pki.ca.certPem], cert: leaf.certPem, key: leaf.keyPem });
  const clients = [
    clientOf(edgeA),
    clientOf(forged),
    Deno.createHttpClient({ caCerts: [pki.ca.certPem] }),
  ];
  try {
    const stream = (node: string) => `${t.url}/v1/config/stream?node_id=${node}&wait=0`;
    const ok = await fetch(stream("edge-a"), { client: clients[0] });
    assert.equal(ok.status, 200);
    assert.equal((await ok.json()).type, "snapshot");
    const other = await fetch(stream("edge-b"), { client: clients[0] });
    assert.equal(other.status, 403);
    assert.equal((await other.json()).error.code, "wrong_node");
    for (const client of clients.slice(1)) {
      await assert.rejects(fetch(stream("edge-a"), { client }), TypeError);
    }
    const status = json<{ tls_refused: number }>(
      await request(t.healthPort, { path: "/v1/config" }),
    );
    assert.equal(status.tls_refused, 2, "each refused handshake is counted");
    assert.equal(t.lines.filter((line) => line.includes("TLS handshake from")).length, 1);
  } finally {
    for (const client of clients) client.close();
    await t.dispose();
    await pki.dispose();
    await stranger.dispose();
  }
});

Deno.test("hub: overlapping reloads publish the set the store made live", async () => {
  // Validation yields on each body_file, so a second reload can start while the first is in it.
  const routes = (version: string) =>
    stringify({
      host: "x.test",
      routes: Array.from({ length: 300 }, (_, i) => ({
        name: `r${i}`,
        match: { path: `/${version}/${i}` },
        respond: { body_file: "page.html" },
      })),
    });
  const t = await startTestHub({
    files: { "x.test.yaml": routes("v0"), "page.html": "<p>page</p>" },
    edit: (c) => c.runtime.watch = false,
  });
  try {
    for (const delay of [0, 5, 20]) {
      await t.write("x.test.yaml", routes(`a${delay}`));
      const first = t.hub.reload();
      await new Promise((resolve) => setTimeout(resolve, delay));
      await t.write("x.test.yaml", routes(`b${delay}`));
      await Promise.all([first, t.hub.reload()]);
      assert.equal(t.hub.feed.live.hash, t.hub.store.current.hash, `delay ${delay} ms`);
    }
    const token = await t.token("edge-a");
    const { answer } = await poll(t, "node_id=edge-a&wait=0", bearer(token));
    assert.equal(answer.hash, t.hub.store.current.hash);
    if (answer.type === "snapshot") {
      assert.match(decode(answer.files)["x.test.yaml"], /\/b20\/299/);
    } else assert.fail(`expected a snapshot, got ${answer.type}`);
  } finally {
    await t.dispose();
  }
});
