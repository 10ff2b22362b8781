/**
 * Tor's CONNECT replies, one test per code, through the real SOCKS client against a scripted
 * SOCKS5 server that answers the CONNECT with that code: the failure's kind and blame (which
 * decide whether the instance's breaker or the backend's negative cache pays), and a message that
 * names the code and its meaning but never the destination. Then once end to end: an onion
 * service that cannot be found (0xF0) on every instance counts against the backend (its negative
 * cache) and leaves every breaker closed — with the generic 0x01 it would have opened them all.
 *
 * @module
 */
import assert from "node:assert/strict";
import { socksConnect, SocksError, type SocksFailureKind } from "../src/egress/socks5.ts";
import { SocksFixture } from "./fixtures/socks5.ts";
import { apiRoute, failure, withProxyEdge } from "./fixtures/proxy_edge.ts";

/** The destination every attempt asks for: a secret name no message may repeat. */
const SECRET = "secretshopxyzsecretshopxyzsecretshopxyzsecretshopxyz1234.onion";

interface ReplyCase {
  readonly code: number;
  readonly kind: SocksFailureKind;
  readonly blame: "instance" | "destination";
  /** What the message must say the code means. */
  readonly meaning: RegExp;
}

const CASES: readonly ReplyCase[] = [
  { code: 0x01, kind: "rejected", blame: "instance", meaning: /general SOCKS server failure/ },
  {
    code: 0x04,
    kind: "destination_unreachable",
    blame: "destination",
    meaning: /host unreachable: the name did not resolve/,
  },
  {
    code: 0x05,
    kind: "destination_refused",
    blame: "destination",
    meaning: /connection refused by the destination/,
  },
  {
    code: 0x06,
    kind: "destination_unreachable",
    blame: "destination",
    meaning: /TTL expired: connecting to the destination timed out/,
  },
  {
    code: 0xf0,
    kind: "destination_unreachable",
    blame: "destination",
    meaning: /onion service descriptor not found/,
  },
  {
    code: 0xf1,
    kind: "destination_unreachable",
    blame: "destination",
    meaning: /onion service descriptor is invalid/,
  },
  {
    code: 0xf2,
    kind: "destination_unreachable",
    blame: "destination",
    meaning: /onion service introduction failed/,
  },
  {
    code: 0xf3,
    kind: "destination_unreachable",
    blame: "destination",
    meaning: /onion service rendezvous failed/,
  },
  {
    code: 0xf4,
    kind: "destination_unreachable",
    blame: "destination",
    meaning: /needs client authorization; none configured/,
  },
  {
    code: 0xf5,
    kind: "destination_unreachable",
    blame: "destination",
    meaning: /client authorization is wrong or revoked/,
  },
  {
    code: 0xf6,
    kind: "destination_unreachable",
    blame: "destination",
    meaning: /invalid onion address/,
  },
  {
    code: 0xf7,
    kind: "destination_unreachable",
    blame: "destination",
    meaning: /onion service introduction timed out/,
  },
];

/** `0xf0` style, as the messages spell a code. */
function hex(code: number): string {
  return `0x${code.toString(16).padStart(2, "0")}`;
}

/** Runs one CONNECT to {@link SECRET} against a server answering `code`; returns the failure. */
async function connectFailure(code: number): Promise<{ error: SocksError; port: number }> {
  const fixture = await SocksFixture.start({ mode: "reply", replyCode: code });
  try {
    const instance = { hostname: "127.0.0.1", port: fixture.port };
    const outcome = await socksConnect(instance, { host: SECRET, port: 80 }, { timeoutMs: 2000 })
      .then((socket) => (socket.destroy(), undefined), (error: unknown) => error);
    assert.ok(outcome instanceof SocksError, `Expected a SocksError for ${hex(code)}: ${outcome}`);
    // The server really saw the CONNECT, by name (the reply answers it, not the greeting).
    assert.deepEqual(fixture.connects, [{ host: SECRET, port: 80, atyp: "domain" }]);
    return { error: outcome, port: fixture.port };
  } finally {
    await fixture.stop();
  }
}

for (const { code, kind, blame, meaning } of CASES) {
  Deno.test(`socksConnect() blames reply ${hex(code)} on the ${blame} as "${kind}"`, async () => {
    const { error, port } = await connectFailure(code);
    assert.equal(error.kind, kind);
    assert.equal(error.blame, blame);
    assert.equal(error.reply, code);
    assert.match(error.message, meaning);
    assert.ok(error.message.includes(`(reply ${hex(code)})`), error.message);
    assert.ok(error.message.includes(`SOCKS instance 127.0.0.1:${port}`), error.message);
    assert.ok(!error.message.includes("secretshop"), error.message);
    assert.match(error.message, /^[A-Z].*[^.]$/);
  });
}

Deno.test("socksConnect() leaves a reply code Tor may add later (0xf8) on the instance", async () => {
  const { error } = await connectFailure(0xf8);
  assert.equal(error.kind, "rejected");
  assert.equal(error.blame, "instance");
  assert.ok(error.message.includes("unknown reply (reply 0xf8)"), error.message);
});

Deno.test("proxy: onion reply 0xf0 on every instance charges the backend and opens no breaker", async () => {
  const onion = { mode: "reply" as const, replyCode: 0xf0 };
  const setup = {
    socks: [onion, onion],
    // A breaker this eager would open on the second instance failure: none may come.
    egress: () => ({
      breaker: { window: 4, min_samples: 2, failure_ratio: 0.5 },
      negative_cache: { failures: 100, ttl_ms: 60_000 },
    }),
    routes: (site: Parameters<typeof apiRoute>[0]) => [apiRoute(site, { attempts: 1 })],
  };
  await withProxyEdge(setup, async (p) => {
    const key = `http://127.0.0.1:${p.upstream.port}`;
    const ports = [p.upstream.port, ...p.socks.map((s) => s.port)];
    for (let i = 1; i <= 4; i++) {
      failure(await p.send({ path: "/api/echo" }), 502, "upstream_unreachable", ports);
    }
    const egress = await p.egress();
    assert.deepEqual(egress.cold_backends, [
      { backend: key, state: "healthy", consecutive_failures: 4, cold_for_ms: 0 },
    ]);
    assert.deepEqual(egress.instances.map((i) => [i.state, i.failures, i.opens]), [
      ["healthy", 0, 0],
      ["healthy", 0, 0],
    ]);
    assert.equal(egress.instances[0].requests + egress.instances[1].requests, 4);
    assert.equal(p.socks[0].connects.length + p.socks[1].connects.length, 4);
    assert.equal(p.upstream.seen.length, 0);
  });
});
