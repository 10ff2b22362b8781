/**
 * The hub's side of the `socks5_tls` transport: a mutual-TLS listener that relays each connection
 * to one instance of the hub's SOCKS pool. The edge's first four bytes inside the encrypted stream
 * name the pool port it wants (the preamble, `egress/relay_preamble.ts`); the relay then pipes raw
 * bytes both ways to `<pool host>:<port>`, so the SOCKS5 stream (greeting, RFC 1929 auth — the
 * edge's per-tenant isolation —, CONNECT, Tor's ExtendedErrors reply codes) passes unchanged and
 * the edge's breakers, scorer and negative cache judge each pool port as they judge a local one.
 *
 * ALPN carries nothing of ours: the relay selects one of `alpn` (`transport.socks5_tls.alpn`,
 * default `http/1.1`) when the client offers it, completes the handshake without one for a client that
 * offers none, and with an empty `alpn` ignores every offer. The port used to be the ALPN
 * protocol `portcullis-socks/<port>`, readable in every ClientHello; such an offer is now answered
 * as any unknown protocol is (`no_application_protocol`), never selected, so a prober without a
 * certificate cannot have the relay confirm it.
 *
 * Refused — the connection closed, nothing relayed: a client without a certificate or with one the
 * client CA did not sign (the TLS layer refuses it), a certificate that does not name exactly one
 * node id, a node not in `api.nodes` (when set), a node the hub's fleet trust does not admit
 * (`admits`: revoked, a door — whatever `api.nodes` or `doors.nodes` say —, a certificate not its
 * current one), and then a preamble that is wrong at any byte, not complete before the stream
 * ends, not complete within `timeoutMs`, or naming a port not in the pool as it is then (so a pool
 * that grows or shrinks needs no new server). The preamble is read only from an admitted node.
 *
 * A relayed stream ends with its node (`node_streams.ts`): at each revocation look the hub asks
 * `admits` again and destroys both sockets of every stream no longer admitted, and a stream open
 * for `transport.max_stream_seconds` is ended the same way (the edge's pool dials a new one).
 *
 * Measured on Deno 2.9.6: a `node:tls` server with `ALPNProtocols` selects a matching protocol,
 * answers an unknown one with the `no_application_protocol` alert (as OpenSSL-based servers with
 * ALPN do), and completes the handshake with `alpnProtocol === false` for a client that offers
 * none; without `ALPNProtocols` it selects nothing whatever is offered.
 *
 * Active streams are counted per port, and every change is told to the pool's optional `report`
 * hook (the embedded Tor pool's scaler reads it).
 *
 * @module
 */
import tls from "node:tls";
import { holdTlsReads } from "../egress/tls_reads.ts";
import { DEFAULT_RELAY_ALPN } from "../egress/transport.ts";
import { anonymizeIp } from "../observe/anonymize.ts";
import { certificateNode, NODE_ID, type RevocationCheck } from "./auth.ts";
import { type Admits, NodeStreams, type StreamEnd } from "./node_streams.ts";
import { pipeToPool, PortStreams } from "./pool_pipe.ts";
import { readPreamble } from "./preamble_read.ts";

/**
 * The pool the relay serves: its host and current ports, and where load is reported.
 *
 * @internal
 */
export interface PoolPorts {
  /** Where every instance listens (an edge names an instance by its port alone). */
  readonly hostname: string;
  /** The ports an edge may name now. */
  ports(): readonly number[];
  /** Told each time a port's count of relayed streams changes. */
  report?(port: number, load: { readonly active: number }): void;
}

/**
 * A pool that never changes: the hub config's `pool.socks`.
 *
 * @example
 * ```ts
 * import { staticPool } from "./socks_relay.ts";
 * staticPool("127.0.0.1", [9050, 9051]).ports(); // [9050, 9051]
 * ```
 */
export function staticPool(hostname: string, ports: readonly number[]): PoolPorts {
  const fixed = [...ports];
  return { hostname, ports: () => fixed };
}

/** Why a connection was closed without being relayed (`preamble`: no valid one naming a port). */
export type RelayRefusal = "preamble" | "node" | "upstream";

/** What the relay is made from. */
export interface SocksRelayOptions {
  readonly pool: PoolPorts;
  /** PEM: the hub's certificate and key, and the CA that signs nodes' client certificates. */
  readonly tls: { readonly cert: string; readonly key: string; readonly ca: string };
  /** Nodes allowed (`api.nodes`); undefined allows every node the CA signed. */
  readonly nodes?: readonly string[];
  /** The fleet CA's revocations: a revoked certificate is refused like an unknown one. */
  readonly revocations?: RevocationCheck;
  /** The ALPN protocols selected when offered (default `http/1.1`; empty: none ever). */
  readonly alpn?: readonly string[];
  /** The fleet trust's check of a node and its certificate serial, at connect and at each look. */
  readonly admits?: Admits;
  /** The longest a relayed stream stays open, in ms (none: no bound). */
  readonly maxStreamMs?: number;
  /** Time allowed for the TLS handshake, for the preamble, and for the connect to the pool. */
  readonly timeoutMs: number;
  /** Where refusals are logged (at most once a minute per reason). */
  readonly log: (line: string) => void;
}

/** Refusals are counted always and logged at most this often per reason. */
const LOG_INTERVAL_MS = 60_000;

/**
 * The relay: a TLS server (bound, armed and closed by `listeners.ts`) and its stream counts.
 *
 * @internal
 */
export class SocksRelay {
  readonly server: tls.Server;
  readonly #options: SocksRelayOptions;
  readonly #streams: PortStreams;
  readonly #nodes: NodeStreams;
  readonly #refused: Record<RelayRefusal, number> = { preamble: 0, node: 0, upstream: 0 };
  readonly #loggedAt: Record<RelayRefusal, number> = {
    preamble: -Infinity,
    node: -Infinity,
    upstream: -Infinity,
  };

  /** @param options the pool, the TLS credentials, the node allowlist, the time bound, the log */
  constructor(options: SocksRelayOptions) {
    this.#options = options;
    this.#streams = new PortStreams(options.pool);
    this.#nodes = new NodeStreams({ admits: options.admits, maxLifetimeMs: options.maxStreamMs });
    const { tls: credentials, timeoutMs } = options;
    const alpn = options.alpn ?? DEFAULT_RELAY_ALPN;
    this.server = tls.createServer({
      ...credentials,
      requestCert: true,
      rejectUnauthorized: true,
      minVersion: "TLSv1.2",
      handshakeTimeout: timeoutMs,
      ...(alpn.length > 0 ? { ALPNProtocols: [...alpn] } : {}),
    }, (socket) => void this.#accept(socket).catch(() => socket.destroy()));
  }

  /** Streams relayed to `port` right now. */
  active(port: number): number {
    return this.#streams.active(port);
  }

  /**
   * Counts for status: streams per port now, streams relayed since start (their pool connect
   * succeeded), refusals by reason (`upstream`: the pool instance could not be reached), and
   * streams the hub ended (`revoked`: their node no longer admitted; `lifetime`).
   */
  snapshot(): {
    active: Record<string, number>;
    relayed: number;
    refused: Record<RelayRefusal, number>;
    ended: Record<StreamEnd, number>;
  } {
    return {
      ...this.#streams.counts(),
      refused: { ...this.#refused },
      ended: this.#nodes.counts().ended,
    };
  }

  /**
   * Asks again whether each open stream's node is admitted, and ends those that are not (told
   * after every revocation look).
   */
  async recheck(): Promise<void> {
    const ended = await this.#nodes.recheck();
    if (ended > 0) {
      this.#options.log(
        `portcullis: hub socks5_tls: ended ${ended} stream(s) of nodes no longer admitted`,
      );
    }
  }

  /** A finished handshake: checks the node, reads the preamble and checks its port, then relays. */
  async #accept(socket: tls.TLSSocket): Promise<void> {
    socket.on("error", () => socket.destroy());
    holdTlsReads(socket); // nothing read past the kernel's buffers while admission is asked
    const node = certificateNode(socket, this.#options.revocations);
    const allowed = this.#options.nodes;
    if (!node.ok || !NODE_ID.test(node.node) || (allowed && !allowed.includes(node.node))) {
      const who = node.ok ? `node ${JSON.stringify(node.node)}` : node.kind;
      return this.#refuse(socket, "node", who);
    }
    const release = await this.#nodes.open(node, function endRelayed() {
      socket.destroy();
    });
    if (!release) {
      return this.#refuse(socket, "node", `node ${JSON.stringify(node.node)} not admitted`);
    }
    if (socket.destroyed) return release();
    socket.once("close", release);
    const preamble = await readPreamble(socket, this.#options.timeoutMs);
    if (!preamble.ok) return this.#refuse(socket, "preamble", `preamble ${preamble.why}`);
    if (!this.#options.pool.ports().includes(preamble.port)) {
      return this.#refuse(socket, "preamble", `port ${preamble.port} not in the pool`);
    }
    if (socket.destroyed) return;
    this.#relay(socket, preamble.port);
  }

  /** Pipes the client's bytes to the pool instance and back, counting the stream while it lasts. */
  #relay(client: tls.TLSSocket, port: number): void {
    const { pool, timeoutMs } = this.#options;
    pipeToPool(client, { host: pool.hostname, port }, timeoutMs, {
      ...this.#streams.hooks(port),
      unreachable: (error) => {
        this.#refuse(client, "upstream", `pool port ${port}: ${error.message}`);
      },
    });
  }

  /** Closes a connection unrelayed; counted, and logged at most once a minute per reason. */
  #refuse(socket: tls.TLSSocket, reason: RelayRefusal, detail: string): void {
    // Read before the destroy: a destroyed socket no longer knows its peer.
    const from = anonymizeIp(socket.remoteAddress);
    socket.destroy();
    this.#refused[reason]++;
    const now = Date.now();
    if (now - this.#loggedAt[reason] < LOG_INTERVAL_MS) return;
    this.#loggedAt[reason] = now;
    this.#options.log(
      `portcullis: hub socks5_tls: connection from ${from} refused (${reason}: ` +
        `${detail}; ${this.#refused[reason]} since start; logged at most once a minute)`,
    );
  }
}
