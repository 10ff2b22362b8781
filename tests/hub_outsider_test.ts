/**
 * The hub's api as an outsider sees it (issue 34, attacked from outside: `hubfp.py` named the
 * software from its route set, the `Allow` sets, a 400 before the 401 and `/healthz`). A real hub
 * under the flags `main.ts flags` derives, with the default `errors`, is probed on every known path
 * (the api's, the health listener's, the tunnel's) and random unknown ones, with every method and
 * good and bad query strings, by a client without a certificate, one with a foreign CA's
 * certificate, and — on a token hub — with no, wrong and someone else's tokens. Every reply must be
 * the same bytes apart from `Date`, except `POST /v1/nodes/register` on a fleet-CA hub. The other
 * side: a registered node still gets its 200s, 405s with `Allow` and 400s.
 *
 * @module
 */
import assert from "node:assert/strict";
import tls from "node:tls";
import type { Buffer } from "node:buffer";
import { TestPki } from "./fixtures/certs.ts";
import { FleetProcess, type NodeCredentials } from "./fixtures/fleet_process.ts";
import { HubProcess } from "./fixtures/hub.ts";
import { exchange } from "./fixtures/http_client.ts";

const METHODS = ["GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS"] as const;

/** Every path the hub serves on any listener, and unknown ones (fresh each run). */
function paths(): string[] {
  const random = () => crypto.randomUUID().slice(0, 8);
  return [
    "/v1/config/stream",
    "/v1/pool",
    "/v1/doors/stream",
    "/v1/nodes/register",
    "/v1/nodes/renew",
    "/healthz",
    "/v1/config",
    "/v1/nodes",
    "/v1/config/reload",
    "/metrics",
    "/v1/tunnel",
    "/",
    `/${random()}`,
    `/v1/${random()}`,
    `/v1/nodes/${random()}`,
    "/v1/nodes/register/",
    "/V1/config/stream",
  ];
}

/** Query strings: none, a good one, and each kind the api's schemas refuse. */
const QUERIES = [
  "",
  "?node_id=edge-1",
  "?node_id=edge-1&have=&wait=0",
  "?node_id=../x",
  "?node_id=edge-1&node_id=edge-2",
  "?node_id=edge-1&have=x&have=y",
];

/** One raw request, closed after its answer; POST and PUT carry a small JSON body. */
function wire(method: string, target: string, headers: readonly string[] = []): string {
  const body = method === "POST" || method === "PUT" ? "{}" : "";
  const length = body ? [`Content-Type: application/json`, `Content-Length: ${body.length}`] : [];
  return [`${method} ${target} HTTP/1.1`, "Host: 127.0.0.1", ...headers, ...length]
    .concat("Connection: close", "", body).join("\r\n");
}

/** A reply's bytes without its `Date` line (the one field that may differ). */
const undated = (text: string) => text.replace(/\r\ndate: [^\r]*/i, "");

/** Sends `bytes` over TLS (with a client certificate when given) and reads until the hub closes. */
function tlsExchange(
  port: number,
  bytes: string,
  options: { readonly ca: string; readonly cert?: string; readonly key?: string },
): Promise<string> {
  return new Promise((resolve, reject) => {
    let text = "";
    const socket = tls.connect({
      host: "127.0.0.1",
      port,
      ...options,
      ALPNProtocols: ["http/1.1"],
    });
    const timer = setTimeout(() => socket.destroy(new Error("no answer in 10 s")), 10_000);
    socket.once("secureConnect", () => socket.write(bytes));
    socket.on("data", (chunk: Buffer) => text += chunk.toString("latin1"));
    socket.once("error", (error) => {
      clearTimeout(timer);
      reject(error);
    });
    socket.once("close", () => {
      clearTimeout(timer);
      resolve(text);
    });
  });
}

/**
 * Sends every path × query × method through `send` and asserts one reply for them all (HEAD's
 * without the body), except the requests `exempt` names. Returns the GET reply.
 */
async function assertUniform(
  send: (bytes: string) => Promise<string>,
  label: string,
  options: {
    readonly headers?: readonly string[];
    readonly exempt?: (method: string, path: string) => boolean;
  } = {},
): Promise<string> {
  const heads = new Map<string, string[]>();
  const whole = new Map<string, string[]>();
  const note = (map: Map<string, string[]>, key: string, who: string) =>
    map.set(key, [...map.get(key) ?? [], who]);
  for (const path of paths()) {
    for (const query of QUERIES) {
      for (const method of METHODS) {
        if (options.exempt?.(method, path)) continue;
        const who = `${method} ${path}${query}`;
        const text = undated(await send(wire(method, path + query, options.headers)));
        const split = text.indexOf("\r\n\r\n");
        note(heads, text.slice(0, split), who);
        if (method === "HEAD") assert.equal(text.slice(split + 4), "", `${label}: ${who}`);
        else note(whole, text, who);
      }
    }
  }
  const report = (map: Map<string, string[]>) =>
    [...map].map(([text, who]) => `${JSON.stringify(text)} <- ${who.slice(0, 4)}`).join("\n");
  assert.equal(heads.size, 1, `${label}: more than one head\n${report(heads)}`);
  assert.equal(whole.size, 1, `${label}: more than one reply\n${report(whole)}`);
  const [reply] = whole.keys();
  assert.match(reply, /^HTTP\/1\.1 404 /, label);
  assert.doesNotMatch(reply, /\r\n(allow|www-authenticate|x-request-id):/i, label);
  return reply;
}

/** The one request an outsider may make: registration, by POST (any other method is the 404). */
const REGISTRATION = (method: string, path: string) =>
  method === "POST" && path === "/v1/nodes/register";

Deno.test("hub outsider: a fleet-CA hub answers a caller without a fleet certificate one 404 on every path, method and query", async () => {
  const fleet = await FleetProcess.start({ pool: true, doors: {}, errors: null });
  const foreign = await TestPki.create();
  try {
    const credentials = await fleet.enrol("edge-1");
    const stranger = await foreign.issue("edge-1");
    const port = fleet.hub.apiPort;
    const ca = fleet.rootPem;
    const bare = await assertUniform((b) => tlsExchange(port, b, { ca }), "no certificate", {
      exempt: REGISTRATION,
    });
    const alien = await assertUniform(
      (b) => tlsExchange(port, b, { ca, cert: stranger.certPem, key: stranger.keyPem }),
      "a foreign CA's certificate",
      { exempt: REGISTRATION },
    );
    assert.equal(alien, bare);
    // A member asking for a path that does not exist gets the very same reply.
    const member = { ca, cert: credentials.chainPem, key: credentials.keyPem };
    const unknown = undated(await tlsExchange(port, wire("GET", "/nothing-here"), member));
    assert.equal(unknown, bare);
    // The one open request still registers: it is answered by registration, not the 404.
    const malformed = await tlsExchange(port, wire("POST", "/v1/nodes/register"), { ca });
    assert.match(malformed, /^HTTP\/1\.1 400 /);
    await fleet.addNode("edge-2");
    assert.equal((await fleet.register("edge-2", "edge")).status, 200);
  } finally {
    await foreign.dispose();
    await fleet.dispose();
  }
});

Deno.test("hub outsider: a registered node still gets its 200s, 405s with Allow and 400s", async () => {
  const fleet = await FleetProcess.start({ pool: true, doors: {}, errors: null });
  try {
    const edge = await fleet.enrol("edge-1");
    const door = await fleet.enrol("door-1", "door");
    assert.equal((await fleet.get("config", "edge-1", edge)).status, 200);
    assert.equal((await fleet.get("pool", "edge-1", edge)).status, 200);
    assert.equal((await fleet.get("doors", "door-1", door)).status, 200);
    const ask = (credentials: NodeCredentials, bytes: string) =>
      tlsExchange(fleet.hub.apiPort, bytes, {
        ca: fleet.rootPem,
        cert: credentials.chainPem,
        key: credentials.keyPem,
      });
    const cases: [string, string, RegExp][] = [
      ["POST", "/v1/config/stream?node_id=edge-1", /^HTTP\/1\.1 405 [^]*\r\nallow: GET, HEAD\r\n/i],
      ["POST", "/v1/doors/stream?node_id=edge-1", /^HTTP\/1\.1 405 [^]*\r\nallow: GET, HEAD\r\n/i],
      ["GET", "/v1/nodes/register", /^HTTP\/1\.1 405 [^]*\r\nallow: POST\r\n/i],
      ["GET", "/v1/nodes/renew", /^HTTP\/1\.1 405 [^]*\r\nallow: POST\r\n/i],
      ["GET", "/v1/config/stream", /^HTTP\/1\.1 400 /],
      ["GET", "/v1/config/stream?node_id=edge-2", /^HTTP\/1\.1 403 /],
      // Liveness is the health listener's alone: the api has no /healthz, even for a node.
      ["GET", "/healthz", /^HTTP\/1\.1 404 /],
    ];
    for (const [method, target, expected] of cases) {
      assert.match(await ask(edge, wire(method, target)), expected, `${method} ${target}`);
    }
  } finally {
    await fleet.dispose();
  }
});

Deno.test("hub outsider: a token hub answers a caller without a node's token one 404 on every path, method and query", async () => {
  const hub = await HubProcess.start({
    edit: (config) => {
      delete config.errors;
    },
  });
  try {
    const send = (bytes: string) => exchange(hub.apiPort, bytes);
    const other = `Authorization: Bearer ${hub.tokenOf("edge-b")}`;
    const replies = [];
    for (
      const [label, headers] of [
        ["no token", []],
        ["a wrong token", ["Authorization: Bearer d2hhdGV2ZXI="]],
        ["a malformed header", ["Authorization: Basic ZWRnZS1hOng="]],
        ["another node's token", [other]],
      ] as const
    ) {
      replies.push(await assertUniform(send, label, { headers }));
    }
    assert.equal(new Set(replies).size, 1, "the token hub's 404 depends on the credential");
    const own = `Authorization: Bearer ${hub.tokenOf("edge-a")}`;
    const served = await send(wire("GET", "/v1/config/stream?node_id=edge-a&wait=0", [own]));
    assert.match(served, /^HTTP\/1\.1 200 /);
    const wrong = await send(wire("POST", "/v1/config/stream?node_id=edge-a", [own]));
    assert.match(wrong, /^HTTP\/1\.1 405 [^]*\r\nallow: GET, HEAD\r\n/i);
    const bad = await send(wire("GET", "/v1/config/stream?node_id=edge-a&have=x&have=y", [own]));
    assert.match(bad, /^HTTP\/1\.1 400 /);
  } finally {
    await hub.dispose();
  }
});
