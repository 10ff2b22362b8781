/**
 * Adversarial forwarding: what the upstream and the client see of the hop through the gateway.
 *
 * - Client-address claims (True-Client-IP, CF-Connecting-IP, … in any case, `_` for `-`) reach
 *   the upstream only from `trusted_proxies`; `forwarding.client_ip_headers` replaces the list.
 * - X-Forwarded-Proto is the scheme of the listener that accepted the request, whatever an
 *   untrusted client claims; a trusted proxy's own `http`/`https` claim is kept.
 * - Via (RFC 9110 §7.6.3): none of the gateway's own by default (the lists pass as they came),
 *   `1.1 <pseudonym>` appended both ways with `forwarding.via: <pseudonym>`, none with `false`,
 *   and the node id is never the name (per-direction choices: blind_marks_test.ts).
 * - Strict-Transport-Security (RFC 6797 §7.2) never goes out over plain HTTP — the tenant
 *   policy's, a `respond` route's and an upstream's alike — and the policy's does over TLS. The
 *   policy's value replaces the other two, so they are checked again in an arena without it.
 *
 * The upstream's view is the recording upstream's `/echo` body: the headers as it received them.
 *
 * @module
 */
import assert from "node:assert/strict";
import http from "node:http";
import type { Socket } from "node:net";
import { certEntry, type IssuedCertificate, TestPki, TlsClient } from "../fixtures/certs.ts";
import { freePorts } from "../fixtures/gateway.ts";
import { json, type RawResponse } from "../fixtures/http_client.ts";
import {
  type Arena,
  type ArenaOptions,
  type ArenaPorts,
  arenaTest,
  headerValues,
  SHOP,
  withArena,
} from "./arena.ts";

/** The proof config's node id: it must name the gateway to nobody. */
const NODE_ID = "proof-edge";
/** The tenant policy's HSTS with `security_headers: {}`. */
const POLICY_HSTS = "max-age=31536000; includeSubDomains";
/** What the marking upstream and the `respond` route set themselves. */
const UPSTREAM_HSTS = "max-age=600";
const ROUTE_HSTS = "max-age=60";
const UPSTREAM_VIA = "1.1 upstream-cache";

/** Every client-address claim the gateway knows by default, as a client might spell them. */
const CLAIMS: readonly [string, string][] = [
  ["True-Client-IP", "203.0.113.1"],
  ["x-client-ip", "203.0.113.2"],
  ["CF-CONNECTING-IP", "203.0.113.3"],
  ["X_Cluster_Client_IP", "203.0.113.4"],
  ["client_ip", "203.0.113.5"],
  ["Fastly-Client-Ip", "203.0.113.6"],
  ["X-Originating-IP", "203.0.113.7"],
  ["X-Remote-IP", "203.0.113.8"],
  ["X_REMOTE_ADDR", "203.0.113.9"],
  ["X-Original-Forwarded-For", "203.0.113.10"],
];

/** The header list the upstream received, from its `/echo` body. */
function upstreamSaw(response: RawResponse): string[] {
  assert.equal(response.status, 200, response.body);
  return json<{ headers: string[] }>(response).headers;
}

/**
 * An upstream on a port reserved when the arena boots and served only inside {@link serve}: every
 * reply carries the upstream's own Strict-Transport-Security and Via.
 */
class MarkingUpstream {
  port = 0;

  /** Reserves the port and lets the egress reach it (an `ArenaOptions.edit`). */
  reserve(config: Record<string, unknown>): void {
    this.port = freePorts(1)[0];
    (config.egress as { direct: string[] }).direct.push(`127.0.0.1:${this.port}`);
  }

  /** Serves while `run` runs. */
  async serve<T>(run: () => Promise<T>): Promise<T> {
    const sockets = new Set<Socket>();
    const server = http.createServer((_request, response) => {
      response.writeHead(200, {
        "content-length": "6",
        "Strict-Transport-Security": UPSTREAM_HSTS,
        Via: UPSTREAM_VIA,
      });
      response.end("marked");
    });
    server.on("connection", (socket: Socket) => {
      sockets.add(socket);
      socket.once("close", () => sockets.delete(socket));
    });
    await new Promise<void>((resolve) =>
      server.listen({ host: "127.0.0.1", port: this.port }, resolve)
    );
    try {
      return await run();
    } finally {
      for (const socket of sockets) socket.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    }
  }
}

/**
 * `shop.test`'s routes: `/api/` to the recording upstream, `/marked/` to `marking`, and `/own`
 * answered by the gateway itself with its own Strict-Transport-Security.
 */
function routesWith(marking: MarkingUpstream): (ports: ArenaPorts) => Record<string, unknown>[] {
  const to = (port: number, prefix: string) => ({
    backends: [{ url: `http://127.0.0.1:${port}` }],
    rewrite: { strip_prefix: prefix },
  });
  return (ports) => [
    { name: "api", match: { prefix: "/api/" }, proxy: to(ports.upstream, "/api") },
    { name: "marked", match: { prefix: "/marked/" }, proxy: to(marking.port, "/marked") },
    {
      name: "own",
      match: { path: "/own" },
      respond: { headers: { "Strict-Transport-Security": ROUTE_HSTS }, body: "own" },
    },
  ];
}

/** How a forwarding arena differs from the untrusted one. */
interface MarkedOptions {
  /** `shop.test`'s policies (default: the security headers on, with their default HSTS). */
  readonly policies?: Record<string, unknown>;
  /** Further edits of the bootstrap config. */
  readonly edit?: (config: Record<string, unknown>) => void;
}

/** Arena options: the marking routes, then the policies and edits asked for. */
function marked(marking: MarkingUpstream, options: MarkedOptions = {}): ArenaOptions {
  return {
    policies: options.policies ?? { security_headers: {} },
    routes: routesWith(marking),
    edit(config) {
      marking.reserve(config);
      options.edit?.(config);
    },
  };
}

/** Sends a GET for `path` with `headers`. */
function get(
  arena: Arena,
  path: string,
  headers: readonly [string, string][] = [],
): Promise<RawResponse> {
  return arena.send({ path, headers });
}

const untrusted = new MarkingUpstream();

arenaTest("adversarial: forwarding from an untrusted client", marked(untrusted), {
  "client-address claims in any case and with underscores never reach the upstream": async (
    arena,
  ) => {
    const seen = upstreamSaw(await get(arena, "/api/echo", [...CLAIMS, ["X-Trace", "kept"]]));
    for (const [name] of CLAIMS) assert.deepEqual(headerValues(seen, name), [], name);
    assert.deepEqual(headerValues(seen, "x-trace"), ["kept"], "ordinary headers pass");
  },

  "X-Forwarded-Proto is http on the plain listener even when the client claims https": async (
    arena,
  ) => {
    const claims: [string, string][] = [
      ["X-Forwarded-Proto", "https"],
      ["X_Forwarded_Proto", "https"],
    ];
    const seen = upstreamSaw(await get(arena, "/api/echo", claims));
    assert.deepEqual(headerValues(seen, "x-forwarded-proto"), ["http"]);
  },

  "by default the upstream receives no Via of the gateway's, the client's list as it came": async (
    arena,
  ) => {
    const alone = upstreamSaw(await get(arena, "/api/echo"));
    assert.deepEqual(headerValues(alone, "via"), []);
    const listed = upstreamSaw(
      await get(arena, "/api/echo", [["Via", "1.0 fred"], ["Via", "1.1 p.example"]]),
    );
    assert.deepEqual(headerValues(listed, "via"), ["1.0 fred, 1.1 p.example"]);
  },

  "by default replies carry no Via of the gateway's, the upstream's own as it came": async (
    arena,
  ) => {
    const echoed = await get(arena, "/api/echo");
    assert.equal(echoed.headers.via, undefined);
    const marked = await untrusted.serve(() => get(arena, "/marked/x"));
    assert.equal(marked.status, 200);
    assert.equal(marked.headers.via, UPSTREAM_VIA);
  },

  "the node id names the gateway in no Via, either way": async (arena) => {
    const echoed = await get(arena, "/api/echo", [["Via", "1.0 fred"]]);
    const marked = await untrusted.serve(() => get(arena, "/marked/x"));
    const own = await get(arena, "/own");
    const vias = [
      ...headerValues(upstreamSaw(echoed), "via"),
      echoed.headers.via,
      marked.headers.via,
      own.headers.via,
    ];
    for (const via of vias) assert.ok(!via?.includes(NODE_ID), `Via names the node: ${via}`);
  },

  "a plain-HTTP reply carries no Strict-Transport-Security, whoever set it": async (arena) => {
    const replies = {
      "the tenant policy": await get(arena, "/api/echo"),
      "the upstream": await untrusted.serve(() => get(arena, "/marked/x")),
      "a respond route": await get(arena, "/own"),
    };
    for (const [setBy, reply] of Object.entries(replies)) {
      assert.equal(reply.status, 200, setBy);
      // The tenant's other security headers are there: only HSTS is withheld.
      assert.equal(reply.headers["x-content-type-options"], "nosniff", setBy);
    }
    const carried = Object.entries(replies)
      .filter(([, reply]) => reply.headers["strict-transport-security"] !== undefined)
      .map(([setBy, reply]) => `${setBy}: ${reply.headers["strict-transport-security"]}`);
    assert.deepEqual(carried, [], "Strict-Transport-Security sent over plain HTTP");
  },
});

const trusted = new MarkingUpstream();

arenaTest(
  "adversarial: forwarding from a trusted proxy, Via pseudonym edge-7",
  marked(trusted, {
    edit(config) {
      config.trusted_proxies = ["127.0.0.0/8"];
      config.forwarding = { via: "edge-7" };
    },
  }),
  {
    "client-address claims from a trusted proxy reach the upstream": async (arena) => {
      const seen = upstreamSaw(await get(arena, "/api/echo", CLAIMS));
      for (const [name, value] of CLAIMS) assert.deepEqual(headerValues(seen, name), [value], name);
    },

    "a trusted proxy's X-Forwarded-Proto claim is kept": async (arena) => {
      const claimed = upstreamSaw(await get(arena, "/api/echo", [["X-Forwarded-Proto", "https"]]));
      assert.deepEqual(headerValues(claimed, "x-forwarded-proto"), ["https"]);
      const unclaimed = upstreamSaw(await get(arena, "/api/echo"));
      assert.deepEqual(headerValues(unclaimed, "x-forwarded-proto"), ["http"]);
    },

    "forwarding.via names the gateway edge-7 both ways": async (arena) => {
      const echoed = await get(arena, "/api/echo", [["Via", "1.0 fred"]]);
      assert.deepEqual(headerValues(upstreamSaw(echoed), "via"), ["1.0 fred, 1.1 edge-7"]);
      assert.equal(echoed.headers.via, "1.1 edge-7");
      const marked = await trusted.serve(() => get(arena, "/marked/x"));
      assert.equal(marked.headers.via, `${UPSTREAM_VIA}, 1.1 edge-7`);
    },
  },
);

const operated = new MarkingUpstream();

arenaTest(
  "adversarial: forwarding with the operator's client-address list, Via off and no HSTS policy",
  marked(operated, {
    policies: {},
    edit(config) {
      config.forwarding = { client_ip_headers: ["x-custom-ip"], via: false };
    },
  }),
  {
    "forwarding.client_ip_headers replaces the list: X-Custom-IP is dropped, True-Client-IP passes":
      async (arena) => {
        const seen = upstreamSaw(
          await get(arena, "/api/echo", [
            ["X-Custom-IP", "203.0.113.1"],
            ["x_custom_ip", "203.0.113.2"],
            ["True-Client-IP", "203.0.113.3"],
            ["CF-Connecting-IP", "203.0.113.4"],
          ]),
        );
        assert.deepEqual(headerValues(seen, "x-custom-ip"), []);
        assert.deepEqual(headerValues(seen, "true-client-ip"), ["203.0.113.3"]);
        assert.deepEqual(headerValues(seen, "cf-connecting-ip"), ["203.0.113.4"]);
      },

    "forwarding.via false writes no Via of the gateway's own, either way": async (arena) => {
      const alone = await get(arena, "/api/echo");
      assert.deepEqual(headerValues(upstreamSaw(alone), "via"), []);
      assert.equal(alone.headers.via, undefined);
      const listed = await get(arena, "/api/echo", [["Via", "1.0 fred"]]);
      assert.deepEqual(headerValues(upstreamSaw(listed), "via"), ["1.0 fred"]);
      const marked = await operated.serve(() => get(arena, "/marked/x"));
      assert.equal(marked.headers.via, UPSTREAM_VIA);
    },

    "with no HSTS policy, an upstream's or a respond route's Strict-Transport-Security is dropped on plain HTTP":
      async (arena) => {
        const upstream = await operated.serve(() => get(arena, "/marked/x"));
        const route = await get(arena, "/own");
        assert.equal(upstream.status, 200);
        assert.equal(route.status, 200);
        assert.equal(upstream.headers["strict-transport-security"], undefined, "the upstream's");
        assert.equal(route.headers["strict-transport-security"], undefined, "the route's");
      },
  },
);

/**
 * Registers a test against an arena whose public lane terminates TLS for `shop.test` with a
 * certificate from a throwaway CA (and the tenant's security headers on); each case is a step
 * and gets a fresh, verified client connection.
 */
function tlsArenaTest(
  name: string,
  edit: (config: Record<string, unknown>) => void,
  cases: Record<string, (client: TlsClient) => Promise<void>>,
): void {
  Deno.test(name, async (t) => {
    const pki = await TestPki.create();
    try {
      const cert = await pki.issue(SHOP);
      const options: ArenaOptions = {
        policies: { security_headers: {} },
        edit(config) {
          terminateTls(config, cert);
          edit(config);
        },
      };
      await withArena(options, async (arena) => {
        for (const [caseName, run] of Object.entries(cases)) {
          const passed = await t.step(caseName, async () => {
            const client = await TlsClient.open(arena.ports.public, {
              servername: SHOP,
              ca: [pki.ca.certPem],
            });
            try {
              await run(client);
            } finally {
              await client.close();
            }
          });
          if (!passed) break;
        }
      });
    } finally {
      await pki.dispose();
    }
  });
}

/** Makes the public lane's listener TLS, with `cert` as its only (default) certificate. */
function terminateTls(config: Record<string, unknown>, cert: IssuedCertificate): void {
  const lanes = config.lanes as Record<string, Record<string, unknown>>;
  lanes.public.tls = { certificates: [certEntry(cert, true)] };
}

/** Sends a GET for `/api/echo` over a kept-alive TLS connection. */
function getOverTls(client: TlsClient, headers: [string, string][] = []): Promise<RawResponse> {
  return client.request({ path: "/api/echo", headers: [["Host", SHOP], ...headers] });
}

tlsArenaTest("adversarial: forwarding over TLS", () => {}, {
  "X-Forwarded-Proto is https on the TLS listener even when the client claims http": async (
    client,
  ) => {
    const seen = upstreamSaw(await getOverTls(client, [["X-Forwarded-Proto", "http"]]));
    assert.deepEqual(headerValues(seen, "x-forwarded-proto"), ["https"]);
  },

  "a TLS reply carries the policy's Strict-Transport-Security and, by default, no Via": async (
    client,
  ) => {
    const reply = await getOverTls(client);
    assert.equal(reply.status, 200);
    assert.equal(reply.headers["strict-transport-security"], POLICY_HSTS);
    assert.equal(reply.headers.via, undefined);
  },
});

tlsArenaTest(
  "adversarial: forwarding over TLS from a trusted proxy",
  (config) => config.trusted_proxies = ["127.0.0.0/8"],
  {
    "a trusted proxy's X-Forwarded-Proto http claim is kept on the TLS listener": async (
      client,
    ) => {
      const claimed = upstreamSaw(await getOverTls(client, [["X-Forwarded-Proto", "http"]]));
      assert.deepEqual(headerValues(claimed, "x-forwarded-proto"), ["http"]);
      const unclaimed = upstreamSaw(await getOverTls(client));
      assert.deepEqual(headerValues(unclaimed, "x-forwarded-proto"), ["https"]);
    },
  },
);
