/**
 * The HTTP server under one lane listener, by what the listener speaks:
 *
 * - plain HTTP/1.1: `node:http`, with its head timeout, idle timeout and header-size cap;
 * - TLS, HTTP/1.1 only: `node:https` with the same options, the certificate chosen per SNI name;
 * - TLS with HTTP/2: `node:http2` (ALPN `h2`, falling back to HTTP/1.1 on the same port).
 *
 * Deno's HTTP/2 server applies none of the HTTP/1.1 options to its fallback connections
 * (measured: a slow head stayed open, a 5 KB header passed a 2 KB cap). So on those connections
 * Portcullis keeps its own clock: a complete request head must arrive within `header_ms` of accept
 * and within `idle_ms` of the previous response, else the connection is closed (header bytes are
 * capped by the request-head checks). Dispatching TLS sockets from a `node:tls` server into plain
 * servers would have kept node's timeouts, but ran at 1.3k requests/s against 24.7k here.
 *
 * @module
 */
import http from "node:http";
import http2 from "node:http2";
import https from "node:https";
import type { Server, Socket } from "node:net";
import type tls from "node:tls";
import type { CertStore } from "../tls/certificates.ts";

/** TLS settings of a listener. */
export interface TlsServing {
  readonly store: CertStore;
  readonly minVersion: "TLSv1.2" | "TLSv1.3";
  readonly http2: boolean;
}

/** Timeouts and caps, from the bootstrap config. */
export interface HttpServerLimits {
  readonly headerMs: number;
  readonly idleMs: number;
  readonly requestMs: number;
  readonly headerBytes: number;
}

/** A request handler, for whichever server carries it. */
export type RequestHandler = (request: http.IncomingMessage, response: http.ServerResponse) => void;

/** The server of one listener and how to close its connections. */
export interface LaneHttpServer {
  readonly server: Server;
  /** Closes connections with no request in flight (HTTP/2: graceful GOAWAY). */
  closeIdle(): void;
  /** Closes every connection now. */
  closeAll(): void;
}

/**
 * Creates the server of one listener (not yet listening).
 *
 * @param limits timeouts and caps
 * @param tls TLS settings, or undefined for plain HTTP
 * @param onRequest the lane's request handler
 */
export function createHttpServer(
  limits: HttpServerLimits,
  tls: TlsServing | undefined,
  onRequest: RequestHandler,
  onSlowHead: (socket: Socket) => void = (socket) => socket.destroy(),
): LaneHttpServer {
  const httpOptions: http.ServerOptions = {
    maxHeaderSize: limits.headerBytes,
    // readHead refuses a Host-less HTTP/1.1 request itself, with the error envelope.
    requireHostHeader: false,
    headersTimeout: limits.headerMs,
    requestTimeout: limits.requestMs,
    keepAliveTimeout: limits.idleMs,
    connectionsCheckingInterval: Math.max(50, Math.min(1000, Math.floor(limits.headerMs / 4))),
  };
  if (!tls) {
    const server = http.createServer(httpOptions, onRequest);
    return {
      server,
      closeIdle: () => server.closeIdleConnections(),
      closeAll: () => server.closeAllConnections(),
    };
  }
  const secure: tls.TlsOptions = {
    SNICallback: function chooseCertificate(name, done) {
      const context = tls.store.lookup(name || undefined);
      if (context) done(null, context);
      else done(new Error("No certificate for this name"));
    },
    minVersion: tls.minVersion,
    handshakeTimeout: limits.headerMs,
  };
  if (!tls.http2) {
    const server = https.createServer(
      { ...httpOptions, ...secure, ALPNProtocols: ["http/1.1"] },
      onRequest,
    );
    return {
      server,
      closeIdle: () => server.closeIdleConnections(),
      closeAll: () => server.closeAllConnections(),
    };
  }
  return http2Server(limits, secure, onRequest, onSlowHead);
}

/** Closes a session gracefully unless it is already ending. */
function closeSession(session: http2.ServerHttp2Session): void {
  if (session.closed || session.destroyed) return;
  session.close();
}

/** HTTP/2 with an HTTP/1.1 fallback whose head and idle limits Portcullis keeps itself. */
function http2Server(
  limits: HttpServerLimits,
  secure: tls.TlsOptions,
  onRequest: RequestHandler,
  onSlowHead: (socket: Socket) => void,
): LaneHttpServer {
  const sessions = new Set<http2.ServerHttp2Session>();
  const fallback = new Set<Socket>();
  const clocks = new WeakMap<object, FallbackClock>();
  const server = http2.createSecureServer({
    ...secure,
    allowHTTP1: true,
    ALPNProtocols: ["h2", "http/1.1"],
  } as http2.SecureServerOptions, function serveHttp2OrFallback(request, response) {
    const clock = clocks.get(request.socket);
    if (clock) {
      clock.requestStarted();
      response.once("close", () => clock.requestEnded());
    }
    onRequest(
      request as unknown as http.IncomingMessage,
      response as unknown as http.ServerResponse,
    );
  });
  server.on("session", (session: http2.ServerHttp2Session) => {
    sessions.add(session);
    session.once("close", () => sessions.delete(session));
    // A session already closing or destroyed is never closed again: a second GOAWAY on a session
    // nghttp2 had ended itself is one suspect of the binding's crashes (decisions §8). Destroying
    // a session from its own "goaway" or "error" event was tried and made them more frequent.
    session.setTimeout(limits.idleMs, () => closeSession(session));
  });
  server.on("secureConnection", (socket: tls.TLSSocket) => {
    if (socket.alpnProtocol === "h2") return;
    fallback.add(socket);
    clocks.set(socket, new FallbackClock(socket, limits, onSlowHead));
    socket.once("close", () => fallback.delete(socket));
  });
  return {
    server,
    closeIdle() {
      for (const session of sessions) closeSession(session);
      for (const socket of fallback) if (clocks.get(socket)?.idle) socket.destroy();
    },
    closeAll() {
      for (const session of sessions) session.destroy();
      for (const socket of fallback) socket.destroy();
    },
  };
}

/**
 * The head and idle limits of one HTTP/1.1 fallback connection: from accept, and from the end of
 * each response, the next complete request head must come within the limit.
 */
class FallbackClock {
  readonly #socket: Socket;
  readonly #idleMs: number;
  readonly #onSlowHead: (socket: Socket) => void;
  #inFlight = 0;
  #timer: number | undefined;
  #bytesAtArm = 0;

  constructor(socket: Socket, limits: HttpServerLimits, onSlowHead: (socket: Socket) => void) {
    this.#socket = socket;
    this.#idleMs = limits.idleMs;
    this.#onSlowHead = onSlowHead;
    this.#arm(limits.headerMs);
    socket.once("close", () => clearTimeout(this.#timer));
  }

  get idle(): boolean {
    return this.#inFlight === 0;
  }

  requestStarted(): void {
    this.#inFlight++;
    clearTimeout(this.#timer);
    this.#timer = undefined;
  }

  requestEnded(): void {
    if (--this.#inFlight === 0) this.#arm(this.#idleMs);
  }

  #arm(ms: number): void {
    clearTimeout(this.#timer);
    this.#bytesAtArm = this.#socket.bytesRead;
    this.#timer = setTimeout(() => this.#expire(), ms) as unknown as number;
  }

  /** A head that started but never finished goes to `onSlowHead`; a silent one is just closed. */
  #expire(): void {
    if (this.#socket.bytesRead > this.#bytesAtArm) this.#onSlowHead(this.#socket);
    else this.#socket.destroy();
  }
}
