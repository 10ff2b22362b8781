/**
 * The TLS front of a public listener: a `node:tls` server that picks the certificate per SNI name
 * from the certificate store (no match and no default: the handshake is refused), negotiates ALPN
 * (`h2` when offered and enabled, else `http/1.1`), bounds the handshake, and hands each finished
 * connection to the lane's HTTP/1.1 or HTTP/2 server. Connections are accounted at TCP accept,
 * before a byte of the handshake is read.
 *
 * One front dispatching to plain servers (rather than `node:https`/`node:http2` listening directly)
 * keeps the HTTP/1.1 head and idle timeouts on TLS connections: the HTTP/2 server's HTTP/1
 * fallback applies none of them (measured: a slow head stayed open).
 *
 * @module
 */
import type { Socket } from "node:net";
import tls from "node:tls";
import type { CertStore } from "../tls/certificates.ts";
import type { LaneServer } from "./lane_server.ts";

/** Options for {@link createTlsFront}. */
export interface TlsFrontOptions {
  readonly store: CertStore;
  readonly minVersion: "TLSv1.2" | "TLSv1.3";
  readonly http2: boolean;
  /** Longest TLS handshake. */
  readonly handshakeMs: number;
  /** Accounts a new TCP connection; false closes it unread. */
  accept(socket: Socket): boolean;
  /** Called when an accounted connection closes. */
  release(): void;
  readonly servers: LaneServer;
  /** Handshake failures worth an operator's look (never per-connection noise). */
  readonly log?: (line: string) => void;
}

/**
 * Creates the TLS server of one public listener (not yet listening).
 */
export function createTlsFront(options: TlsFrontOptions): tls.Server {
  const { store, servers } = options;
  const front = tls.createServer({
    SNICallback: function chooseCertificate(name, done) {
      const context = store.lookup(name || undefined);
      if (context) done(null, context);
      else done(new Error("No certificate for this name"));
    },
    ALPNProtocols: options.http2 && servers.h2 ? ["h2", "http/1.1"] : ["http/1.1"],
    minVersion: options.minVersion,
    handshakeTimeout: options.handshakeMs,
  } as tls.TlsOptions, function dispatchSecure(socket) {
    if (socket.alpnProtocol === "h2" && servers.h2) servers.h2.emit("secureConnection", socket);
    else servers.http.emit("connection", socket);
  });
  front.on("connection", function acceptTls(socket: Socket) {
    if (!options.accept(socket)) {
      socket.destroy();
      return;
    }
    socket.once("close", () => options.release());
  });
  front.on("tlsClientError", (_error: Error, socket: tls.TLSSocket) => socket.destroy());
  return front;
}
