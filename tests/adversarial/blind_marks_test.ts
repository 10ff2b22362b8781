/**
 * Issue 34, the product-blind default, header by header: what a backend and a client read of the
 * gateway in a proxied exchange, against the real gateway under its derived flags and real
 * upstreams.
 *
 * - By default: no Via of the gateway's own either way (the lists pass as they came), no header
 *   naming the tenant, the route or the request id toward the backend, no header name or value
 *   holding the product's name or the node id on either side — whatever X-Portcullis-* a client or
 *   an upstream sends.
 * - The operator's choices are honoured: `forwarding.via: {backends, clients}` writes each
 *   direction's own pseudonym (a swap fails here), `forwarding.backend_headers` writes the names
 *   given — an X-Portcullis-* name included — and those names are the gateway's: a client's copy,
 *   in any case or with `_`, never reaches the backend, an upstream's never reaches the client.
 *
 * The backend's view is the recording upstream's `/echo` body; a second upstream marks its replies
 * with a Via and with copies of the named headers.
 *
 * @module
 */
import assert from "node:assert/strict";
import http from "node:http";
import type { Socket } from "node:net";
import { freePorts } from "../fixtures/gateway.ts";
import { json, type RawResponse } from "../fixtures/http_client.ts";
import { type Arena, type ArenaPorts, arenaTest, headerValues, SHOP } from "./arena.ts";

/** The proof config's node id. */
const NODE_ID = "proof-edge";
const UPSTREAM_VIA = "1.1 upstream-cache";

/** What a client forges: the old identity headers and the operator's names, in several spellings. */
const FORGED: readonly [string, string][] = [
  ["X-Portcullis-Tenant", "bank.test"],
  ["x_portcullis_route", "admin"],
  ["X-PORTCULLIS-REQUEST-ID", "forged"],
  ["X-Portcullis-Admin", "true"],
  ["X-Tenant", "bank.test"],
  ["x_tenant", "bank.test"],
  ["X-TENANT", "bank.test"],
  ["X-Route", "admin"],
  ["X_Route", "admin"],
];

/**
 * An upstream on a port reserved when the arena boots and served only inside {@link serve}: every
 * reply carries a Via and copies of the gateway's header names.
 */
class MarkingUpstream {
  port = 0;

  /** Reserves the port and grants it to the egress (an `ArenaOptions.edit`). */
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
        Via: UPSTREAM_VIA,
        "X-Tenant": "upstream",
        "X-Route": "upstream",
        "X-Portcullis-Request-Id": "upstream",
        "X-Portcullis-Node": "upstream",
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

/** `/api/` to the recording upstream, `/marked/` to `marking`. */
function routesTo(marking: MarkingUpstream): (ports: ArenaPorts) => Record<string, unknown>[] {
  const to = (port: number, prefix: string) => ({
    backends: [{ url: `http://127.0.0.1:${port}` }],
    rewrite: { strip_prefix: prefix },
  });
  return (ports) => [
    { name: "api", match: { prefix: "/api/" }, proxy: to(ports.upstream, "/api") },
    { name: "marked", match: { prefix: "/marked/" }, proxy: to(marking.port, "/marked") },
  ];
}

/** The header list the backend received, from its `/echo` body. */
function upstreamSaw(response: RawResponse): string[] {
  assert.equal(response.status, 200, response.body);
  return json<{ headers: string[] }>(response).headers;
}

/** The reply's header lines, "name: value", as the client read them. */
function replyLines(response: RawResponse): string[] {
  return Object.entries(response.headers).map(([name, value]) => `${name}: ${value}`);
}

/** The entries of a raw header list, "name: value". */
function rawLines(raw: readonly string[]): string[] {
  const out: string[] = [];
  for (let i = 0; i < raw.length; i += 2) out.push(`${raw[i]}: ${raw[i + 1]}`);
  return out;
}

/** The lines that name the product or the node, in any case. */
function naming(lines: readonly string[]): string[] {
  return lines.filter((line) => /portcullis/i.test(line) || line.includes(NODE_ID));
}

/** The request a case sends: the forged headers, with a Via list of the client's own. */
function forgedGet(arena: Arena, path: string): Promise<RawResponse> {
  return arena.send({ path, headers: [["Via", "1.0 fred"], ...FORGED, ["X-Keep", "kept"]] });
}

const blind = new MarkingUpstream();

arenaTest("adversarial: by default no forwarded message names the gateway", {
  routes: routesTo(blind),
  edit: (config) => blind.reserve(config),
}, {
  "the backend reads no Via of the gateway's, no product name and no tenant or route header":
    async (arena) => {
      const seen = upstreamSaw(await forgedGet(arena, "/api/echo"));
      assert.deepEqual(naming(rawLines(seen)), [], "a header names the gateway to the backend");
      assert.deepEqual(headerValues(seen, "via"), ["1.0 fred"], "the client's Via, alone");
      for (const [name] of FORGED.slice(4)) {
        // Not the gateway's unless named: an ordinary header, passed as the client sent it.
        assert.ok(headerValues(seen, name).every((value) => value !== SHOP), name);
      }
      assert.deepEqual(headerValues(seen, "x-keep"), ["kept"]);
    },

  "the client reads no Via of the gateway's and no product name in a proxied reply": async (
    arena,
  ) => {
    // The recording upstream answers with its own X-Portcullis-Tenant: it never reaches the client.
    const echoed = await forgedGet(arena, "/api/echo");
    assert.equal(echoed.status, 200);
    assert.deepEqual(naming(replyLines(echoed)), []);
    assert.equal(echoed.headers.via, undefined);
    const marked = await blind.serve(() => arena.send({ path: "/marked/x" }));
    assert.equal(marked.status, 200, marked.body);
    assert.equal(marked.headers.via, UPSTREAM_VIA, "the upstream's Via, as it came");
    assert.deepEqual(naming(replyLines(marked)), []);
  },
});

const named = new MarkingUpstream();

arenaTest("adversarial: the operator's Via pseudonyms and backend header names are honoured", {
  routes: routesTo(named),
  edit(config) {
    named.reserve(config);
    config.forwarding = {
      via: { backends: "relay-3", clients: "front-2" },
      backend_headers: {
        tenant: "X-Tenant",
        route: "X-Route",
        request_id: "X-Portcullis-Request-Id",
      },
    };
  },
}, {
  "the backend reads relay-3 in Via and the named headers, the gateway's values only": async (
    arena,
  ) => {
    const response = await forgedGet(arena, "/api/echo");
    const seen = upstreamSaw(response);
    assert.deepEqual(headerValues(seen, "via"), ["1.0 fred, 1.1 relay-3"]);
    assert.deepEqual(headerValues(seen, "x-tenant"), [SHOP], "every client copy dropped");
    assert.deepEqual(headerValues(seen, "x-route"), ["api"]);
    const requestId = response.headers["x-request-id"];
    assert.ok(requestId && requestId !== "forged");
    assert.deepEqual(headerValues(seen, "x-portcullis-request-id"), [requestId]);
    // Unnamed X-Portcullis-* from a client is still dropped: a backend may read the old names.
    for (const name of ["x-portcullis-tenant", "x-portcullis-route", "x-portcullis-admin"]) {
      assert.deepEqual(headerValues(seen, name), [], name);
    }
  },

  "the client reads front-2 in Via and no upstream copy of a named header": async (arena) => {
    const echoed = await arena.send({ path: "/api/echo" });
    assert.equal(echoed.headers.via, "1.1 front-2");
    const marked = await named.serve(() => arena.send({ path: "/marked/x" }));
    assert.equal(marked.status, 200, marked.body);
    assert.equal(marked.headers.via, `${UPSTREAM_VIA}, 1.1 front-2`);
    for (const name of ["x-tenant", "x-route", "x-portcullis-request-id", "x-portcullis-node"]) {
      assert.equal(marked.headers[name], undefined, name);
    }
  },
});
