/**
 * TLS to `https://` backends, on top of whatever way out the attempt took: the SOCKS tunnel (a
 * clearnet backend reached through a Tor exit travels encrypted past the exit) or a `direct`
 * connection. SNI and the name checked are the backend's host (or the route's `server_name`); the
 * chain is verified against the runtime's roots or the route's `ca_file`; a client certificate is
 * offered when the route has one (mTLS); TLS 1.2 is the floor unless the route asks for 1.3.
 *
 * The handshake is part of making the connection: it shares the connect timeout, stops with the
 * attempt's abort signal, and a failure is an {@link UpstreamTlsError} — nothing of the request was
 * written, so the request may go elsewhere whatever its method. The cause (an unknown issuer, an
 * expired certificate, a wrong name, a refused client certificate) goes to the log, never to the
 * client. Kept-alive connections are pooled per TLS identity (`identity`): a connection made with
 * one route's CA or client certificate is never reused for another's.
 *
 * @module
 */
import tls from "node:tls";
import { isIP } from "node:net";
import type { Duplex } from "node:stream";

/** What an `https://` backend is reached with. */
export interface UpstreamTls {
  /** SNI, and the name the certificate must carry. */
  readonly servername: string;
  /** PEM roots to trust instead of the runtime's. */
  readonly ca?: string;
  /** PEM client certificate chain and key (mTLS). */
  readonly cert?: string;
  readonly key?: string;
  readonly minVersion: "TLSv1.2" | "TLSv1.3";
  /** Distinguishes pools: connections with different settings are never shared. */
  readonly identity: string;
}

/** The request option that carries an attempt's {@link UpstreamTls} to the agent. */
export const UPSTREAM_TLS = "portcullisUpstreamTls";

/** The TLS settings an attempt passed in its request options, if any. */
export function upstreamTlsOf(options: object): UpstreamTls | undefined {
  const value = (options as Record<string, unknown>)[UPSTREAM_TLS];
  return value && typeof value === "object" ? value as UpstreamTls : undefined;
}

/** A TLS handshake with a backend failed (or timed out): the backend's fault, nothing was sent. */
export class UpstreamTlsError extends Error {
  /** Node's error code, when there is one (`CERT_HAS_EXPIRED`, `ERR_TLS_CERT_ALTNAME_INVALID`…). */
  readonly code?: string;

  /** @param message what failed, @param options the code and the underlying cause */
  constructor(message: string, options: { code?: string; cause?: unknown } = {}) {
    super(message, { cause: options.cause });
    this.name = "UpstreamTlsError";
    if (options.code !== undefined) this.code = options.code;
  }
}

/**
 * Runs the TLS handshake over an established connection.
 *
 * @param socket the tunnel or direct connection (closed when the handshake fails)
 * @param settings the backend's TLS settings
 * @param limits the time left of the connect timeout, and the attempt's abort signal
 * @returns the TLS socket, verified
 * @throws {UpstreamTlsError} on a failed, refused or late handshake
 */
export function startUpstreamTls(
  socket: Duplex,
  settings: UpstreamTls,
  limits: { timeoutMs: number; signal?: AbortSignal },
): Promise<tls.TLSSocket> {
  return new Promise((resolve, reject) => {
    let secure: tls.TLSSocket;
    try {
      secure = tls.connect({
        socket,
        ...identityOptions(settings.servername),
        ...material(settings),
      });
    } catch (error) {
      socket.destroy();
      return reject(new UpstreamTlsError(`TLS handshake failed: ${error}`, { cause: error }));
    }
    const fail = (error: UpstreamTlsError) => {
      clearTimeout(timer);
      limits.signal?.removeEventListener("abort", onAbort);
      secure.destroy();
      socket.destroy();
      reject(error);
    };
    const onAbort = () => fail(new UpstreamTlsError("TLS handshake abandoned"));
    const timer = setTimeout(
      () => fail(new UpstreamTlsError(`TLS handshake took over ${limits.timeoutMs} ms`)),
      Math.max(1, limits.timeoutMs),
    );
    if (limits.signal?.aborted) return onAbort();
    limits.signal?.addEventListener("abort", onAbort, { once: true });
    secure.once("error", (error: Error & { code?: string }) => {
      fail(
        new UpstreamTlsError(`TLS handshake failed: ${error.message}`, {
          code: error.code,
          cause: error,
        }),
      );
    });
    secure.once("secureConnect", () => {
      clearTimeout(timer);
      limits.signal?.removeEventListener("abort", onAbort);
      resolve(secure); // the error listener stays: a later error only destroys the socket
    });
  });
}

/**
 * SNI and the name checked. A name is sent as SNI and checked against the DNS names of the
 * certificate; an IP literal may not be sent as SNI (RFC 6066 §3), so none is sent and the address
 * is checked against the certificate's IP addresses.
 */
function identityOptions(name: string): tls.ConnectionOptions {
  if (isIP(name) === 0) return { servername: name };
  return { checkServerIdentity: (_host, cert) => tls.checkServerIdentity(name, cert) };
}

/** Roots, client certificate, version floor and ALPN; verification is never off. */
function material(settings: UpstreamTls): tls.ConnectionOptions {
  return {
    ca: settings.ca,
    cert: settings.cert,
    key: settings.key,
    minVersion: settings.minVersion,
    ALPNProtocols: ["http/1.1"],
    rejectUnauthorized: true,
  };
}

/**
 * The pool name of a connection: node's name for the destination, plus the TLS identity when the
 * attempt is `https`, so a plain and a TLS connection to one host:port are never confused.
 *
 * @example
 * ```ts
 * import { poolName } from "./upstream_tls.ts";
 * poolName("api.test:443:", { portcullisUpstreamTls: { identity: "roots|api.test" } });
 * // "api.test:443::tls:roots|api.test"
 * ```
 */
export function poolName(base: string, options: object): string {
  const settings = upstreamTlsOf(options);
  return settings ? `${base}:tls:${settings.identity}` : base;
}
