/**
 * The hub's listeners. Each is made unarmed (a connection that arrives before arming is destroyed),
 * bound in order, proven distinct from every other after binding (a port 0 or a wildcard is only
 * known then), and armed only then. A request gets a request id (an inbound `X-Request-Id` kept by
 * the edge's rule), its route's reply, or the `internal` failure when the route throws.
 *
 * @module
 */
import http from "node:http";
import { anonymizeIp } from "../observe/anonymize.ts";
import { diagnostics } from "../observe/diag.ts";
import https from "node:https";
import type { Buffer } from "node:buffer";
import type { Server, Socket } from "node:net";
import type { Duplex } from "node:stream";
import { overlaps } from "../boot/distinct.ts";
import { BootError } from "../boot/boot_error.ts";
import { formatAddress, type ListenerAddress } from "../config/load.ts";
import { ErrorPages } from "../request/error_pages.ts";
import { failureReply } from "../request/errors.ts";
import type { Reply } from "../request/reply.ts";
import { requestIdFor } from "../request/request_id.ts";
import { bindServer, boundAddress, closeServerAt } from "../server/bind.ts";
import type { HubConfig, HubListenerRole } from "./config.ts";
import { writeReply } from "../request/write_reply.ts";

/** Answers one request: the reply to write, or none when the client has gone. */
export type HubRoute = (
  request: http.IncomingMessage,
  response: http.ServerResponse,
  requestId: string,
) => Promise<Reply | undefined>;

/** Takes over an `Upgrade` request's socket (the HTTPS tunnel's WebSocket streams). */
export type HubUpgrade = (request: http.IncomingMessage, socket: Duplex, head: Buffer) => void;

/**
 * One listener to make: its role, where it binds, what answers it, TLS for the api and the tunnel,
 * and what takes its upgrades (none: node's server does what it does without a listener).
 */
export type ListenerSpec =
  | {
    readonly role: HubListenerRole;
    readonly address: ListenerAddress;
    readonly route: HubRoute;
    readonly tls?: https.ServerOptions;
    readonly upgrade?: HubUpgrade;
  }
  | {
    readonly role: HubListenerRole;
    readonly address: ListenerAddress;
    /** A server made elsewhere (the SOCKS relay's): bound, armed and closed like the others. */
    readonly server: Server;
  };

/** A listener bound (or to be) and its live sockets. */
interface BoundServer {
  readonly role: HubListenerRole;
  readonly address: ListenerAddress;
  readonly server: Server;
  readonly sockets: Set<Socket>;
}

/** Refused TLS handshakes are counted always and logged at most this often. */
const TLS_LOG_INTERVAL_MS = 60_000;

/** Refused TLS handshakes: every one counted (for status), logged at most once a minute. */
export class TlsRefusals {
  count = 0;
  #loggedAt = -Infinity;
  readonly #log: (line: string) => void;

  /** @param log where the (rate-limited) refusal lines go */
  constructor(log: (line: string) => void) {
    this.#log = log;
  }

  /** Counts one refused handshake, and logs it unless one was logged within the interval. */
  note(error: Error, socket: Socket, role: HubListenerRole = "api"): void {
    this.count++;
    if (Date.now() - this.#loggedAt < TLS_LOG_INTERVAL_MS) return;
    this.#loggedAt = Date.now();
    this.#log(
      `portcullis: hub ${role}: TLS handshake from ${anonymizeIp(peerOf(socket))} refused: ` +
        `${error.message} (${this.count} since start; logged at most once a minute)`,
    );
  }
}

/**
 * The peer of a socket a TLS handshake failed on. By `tlsClientError`, Deno 2.9.6's TLS socket has
 * lost its handle and answers `remoteAddress` undefined; the TCP socket it wraps (`_parent`, not a
 * public field) still knows the peer (measured; tests/anon_addresses_test.ts boots a hub to see it).
 */
function peerOf(socket: Socket): string | undefined {
  return socket.remoteAddress ?? (socket as { _parent?: Socket })._parent?.remoteAddress;
}

/** The hub's listeners, from made to closed; see the module doc for the order. */
export class HubListeners {
  readonly #servers: BoundServer[];
  readonly #listening: BoundServer[] = [];
  #armed = false;

  /**
   * Makes every listener, unarmed.
   *
   * @param specs the listeners, in the order they bind
   * @param options the hub's HTTP timeouts, where refused handshakes are counted, and how failures
   *   read (absent: the minimal default)
   */
  constructor(
    specs: readonly ListenerSpec[],
    options: {
      readonly timeouts: HubConfig["timeouts"];
      readonly refusals: TlsRefusals;
      readonly errorPages?: ErrorPages;
    },
  ) {
    const pages = options.errorPages ?? ErrorPages.minimal();
    this.#servers = specs.map((spec) => makeServer(spec, options.timeouts, pages));
    for (const bound of this.#servers) {
      bound.server.on("tlsClientError", (error: Error, socket: Socket) => {
        options.refusals.note(error, socket, bound.role);
      });
      bound.server.on("connection", (socket: Socket) => {
        if (!this.#armed) return socket.destroy();
        bound.sockets.add(socket);
        socket.once("close", () => bound.sockets.delete(socket));
      });
    }
  }

  /**
   * Binds every listener in order and proves no two overlap.
   *
   * @returns each listener's role and actual address
   * @throws {BootError} when one cannot bind or two overlap (every bound one is closed first)
   */
  async bind(): Promise<{ role: HubListenerRole; address: ListenerAddress }[]> {
    try {
      for (const bound of this.#servers) {
        const what = `Cannot bind the hub ${bound.role} listener on ${
          formatAddress(bound.address)
        }`;
        await bindServer(bound.server, bound.address, what);
        this.#listening.push(bound);
      }
    } catch (error) {
      await this.close();
      throw new BootError([(error as Error).message]);
    }
    const actual = this.#listening.map((bound) => ({
      role: bound.role,
      address: boundAddress(bound),
    }));
    const clash = actual.flatMap((a, i) =>
      actual.slice(i + 1).filter((b) => overlaps(a.address, b.address)).map((b) =>
        `The ${a.role} listener ${formatAddress(a.address)} overlaps the ${b.role} listener ` +
        formatAddress(b.address)
      )
    );
    if (clash.length > 0) {
      await this.close();
      throw new BootError(clash);
    }
    return actual;
  }

  /** Lets connections in (until now each was destroyed on arrival). */
  arm(): void {
    this.#armed = true;
  }

  /** Closes every bound listener and destroys its sockets. */
  async close(): Promise<void> {
    await Promise.all(this.#listening.map(closeServerAt));
  }
}

/** The server of one listener: one made elsewhere as given, or node:http(s) answering its route. */
function makeServer(
  spec: ListenerSpec,
  timeouts: HubConfig["timeouts"],
  pages: ErrorPages,
): BoundServer {
  if ("server" in spec) {
    return { role: spec.role, address: spec.address, server: spec.server, sockets: new Set() };
  }
  const { role, address, route, tls } = spec;
  const onRequest = (request: http.IncomingMessage, response: http.ServerResponse) => {
    const requestId = requestIdFor(request.headers["x-request-id"]);
    route(request, response, requestId).then((reply) => {
      if (reply) writeReply(response, reply, requestId, pages);
    }).catch((error) => {
      if (!response.headersSent) {
        writeReply(response, failureReply("internal", requestId), requestId, pages);
      } else response.destroy();
      diagnostics().error(`hub ${role} request failed: ${error}`);
    });
  };
  const server = tls ? https.createServer(tls, onRequest) : http.createServer(onRequest);
  if (spec.upgrade) server.on("upgrade", spec.upgrade);
  server.headersTimeout = timeouts.headerMs;
  server.requestTimeout = timeouts.headerMs;
  server.keepAliveTimeout = timeouts.idleMs;
  server.maxHeadersCount = 100;
  return { role, address, server, sockets: new Set() };
}
