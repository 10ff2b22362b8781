/**
 * How the edge reaches a SOCKS instance: the dial a SOCKS handshake runs over. Plain TCP to the
 * instance's address for a local SOCKS server (and for `egress.transport.kind: wireguard`, whose
 * tunnel is the operator's: the edge dials the hub's private address and a pool port in plain
 * TCP); for `socks5_tls`, a mutual-TLS connection to the hub's relay whose first four bytes, inside
 * the encrypted stream, name the pool port (`relay_preamble.ts`; the relay's side is
 * `hub/socks_relay.ts`), its ClientHello offering a common ALPN value (`egress.transport.alpn`,
 * default `http/1.1`, as the tunnel and a browser offer) that says nothing of the product or the
 * port; for `https_tunnel`,
 * a WebSocket over mutual TLS to the hub's endpoint that names the pool port in its first message
 * (`tunnel_dial.ts`, the hub's side is `hub/https_tunnel.ts`). The SOCKS5 bytes inside are the same
 * every way, so the handshake code (`socks5.ts`) does not know which ran.
 *
 * The TLS credentials are read once, synchronously, when the egress is made at boot: a file that
 * cannot be read fails the boot (not the first request), and every later dial reuses one secure
 * context. The key must be a regular file only its owner may read (0600 or 0400), as every key
 * the gateway reads.
 *
 * Both TLS dials hold their reads when paused (`tls_reads.ts`): on Deno 2.9.6 a paused `node:tls`
 * socket goes on reading its TCP socket into memory, so a response a slow client reads would
 * otherwise be taken from the hub as fast as the hub sends it.
 *
 * `socks5_tls` stays the fingerprintable transport even so (a dedicated port that asks every
 * visitor for a client certificate, SOCKS5-sized records right after the handshake): `check` and
 * the hub's boot say {@link SOCKS5_TLS_WARNING} when it is chosen.
 *
 * @module
 */
import net, { type Socket } from "node:net";
import tls from "node:tls";
import { encodePreamble } from "./relay_preamble.ts";
import { holdTlsReads } from "./tls_reads.ts";
import { tunnelDial } from "./tunnel_dial.ts";

/** The ALPN protocols offered to the relay (and selected by it) unless the config says others. */
export const DEFAULT_RELAY_ALPN: readonly string[] = ["http/1.1"];

/** What `check` and the hub's boot say, in one line, when the `socks5_tls` transport is chosen. */
export const SOCKS5_TLS_WARNING = "socks5_tls is the fingerprintable transport: its pool port " +
  "travels inside TLS, but a dedicated port that asks every visitor for a client certificate " +
  "and carries SOCKS5-sized records is recognisable on the path; prefer wireguard, else " +
  'https_tunnel (deploy/README.md, "Which transport to the hub\'s pool")';

/** A connection being made to a SOCKS instance, and the event that says it can carry SOCKS. */
export interface Dialled {
  readonly socket: Socket;
  /** `connect` for TCP; `secureConnect` once the TLS handshake (and ALPN) is done. */
  readonly ready: "connect" | "secureConnect";
}

/** Opens one connection to a SOCKS instance (a handshake calls it once per attempt). */
export type SocksDial = () => Dialled;

/**
 * Plain TCP to `hostname:port`: the default dial.
 *
 * @param address the SOCKS server (or, over WireGuard, the hub's private address and a pool port)
 */
export function tcpDial(address: { hostname: string; port: number }): SocksDial {
  const dial = function dialTcp(): Dialled {
    return {
      socket: net.connect({ host: address.hostname, port: address.port }),
      ready: "connect",
    };
  };
  TCP_DIALS.add(dial);
  return dial;
}

/** The dials {@link tcpDial} made. */
const TCP_DIALS = new WeakSet<SocksDial>();

/**
 * True when `dial` is plain TCP to the instance's own address ({@link tcpDial}): the gateway can
 * then make the same connection itself with `Deno.connect` (owned_conns.ts).
 */
export function isTcpDial(dial: SocksDial): boolean {
  return TCP_DIALS.has(dial);
}

/** The `socks5_tls` or `https_tunnel` transport's settings, paths resolved. */
export interface TlsTransportSettings {
  /** SOCKS5 in TLS, the port named inside it (the default), or a WebSocket per connection. */
  readonly kind?: "socks5_tls" | "https_tunnel";
  /** `socks5_tls`: the ALPN protocols offered (default {@link DEFAULT_RELAY_ALPN}; empty: none). */
  readonly alpn?: readonly string[];
  /** The hub relay's (or tunnel endpoint's) address. */
  readonly hostname: string;
  readonly port: number;
  /** The name the hub's certificate must carry, and the SNI sent (default: `hostname`). */
  readonly serverName?: string;
  /** The node's client certificate and key, and the CA that signs the hub's certificate. */
  readonly certFile: string;
  readonly keyFile: string;
  readonly caFile: string;
}

/** The most bytes a certificate, key or CA file may have. */
const MAX_PEM_BYTES = 1 << 20;

/** The `socks5_tls` and `https_tunnel` transports: one secure context, and a dial per pool port. */
export class TlsTransport {
  readonly settings: TlsTransportSettings;
  readonly #context: tls.SecureContext;

  /**
   * Reads the credentials and makes the secure context.
   *
   * @throws {Error} naming the setting and file when one cannot be read or is not usable
   */
  constructor(settings: TlsTransportSettings) {
    this.settings = settings;
    const cert = readPem(settings.certFile, "egress.transport.cert_file", false);
    const key = readPem(settings.keyFile, "egress.transport.key_file", true);
    const ca = readPem(settings.caFile, "egress.transport.ca_file", false);
    try {
      this.#context = tls.createSecureContext({ cert, key, ca, minVersion: "TLSv1.2" });
    } catch (error) {
      throw new Error(
        `Cannot use egress.transport's certificate, key or CA: ${(error as Error).message}`,
      );
    }
  }

  /**
   * The dial for one pool port: TLS to the hub with the client certificate, offering the
   * configured ALPN protocols; once the handshake is done, the preamble naming the port is the
   * first write, ahead of the SOCKS5 greeting (this listener is added before the handshake
   * code's). A relay that refuses the port closes the connection, which the handshake code counts
   * against that port. With `https_tunnel`, a WebSocket to the hub's endpoint whose dial op names
   * the port (`tunnel_dial.ts`).
   */
  dial(poolPort: number): SocksDial {
    const { hostname, port, serverName } = this.settings;
    const preamble = encodePreamble(poolPort);
    const alpn = this.settings.alpn ?? DEFAULT_RELAY_ALPN;
    const context = this.#context;
    // SNI carries names only; with an IP address and no server name, the certificate must name
    // the address.
    const servername = serverName ?? (net.isIP(hostname) ? undefined : hostname);
    if (this.settings.kind === "https_tunnel") {
      return tunnelDial({ hostname, port, servername, context, poolPort });
    }
    return function dialHubTls(): Dialled {
      const socket = tls.connect({
        host: hostname,
        port,
        servername,
        secureContext: context,
        ...(alpn.length > 0 ? { ALPNProtocols: [...alpn] } : {}),
        rejectUnauthorized: true,
      });
      holdTlsReads(socket); // a paused response reads no further than over plain TCP
      socket.once("secureConnect", function namePoolPort() {
        socket.write(preamble);
      });
      return { socket, ready: "secureConnect" };
    };
  }
}

/** Reads one PEM file; a key must be readable by its owner only. */
function readPem(file: string, setting: string, secret: boolean): string {
  try {
    const info = Deno.statSync(file);
    if (!info.isFile) throw new Error("not a regular file");
    if (info.size > MAX_PEM_BYTES) throw new Error(`larger than ${MAX_PEM_BYTES} bytes`);
    if (secret && info.mode !== null && (info.mode & 0o077) !== 0) {
      throw new Error("group or others may read it (give it mode 0600)");
    }
    return Deno.readTextFileSync(file);
  } catch (error) {
    throw new Error(`Cannot read ${setting} "${file}": ${(error as Error).message}`);
  }
}
