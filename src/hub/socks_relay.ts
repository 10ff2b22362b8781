/**
 * The hub's side of the `socks5_tls` transport: a mutual-TLS listener that relays each connection
 * to one instance of the hub's SOCKS pool. The edge offers exactly one ALPN protocol,
 * `portcullis-socks/<port>`, naming the pool port it wants; after the handshake the relay pipes raw
 * bytes both ways to `<pool host>:<port>`, so the SOCKS5 stream (greeting, RFC 1929 auth — the
 * edge's per-tenant isolation —, CONNECT, Tor's ExtendedErrors reply codes) passes unchanged and
 * the edge's breakers, scorer and negative cache judge each pool port as they judge a local one.
 *
 * Refused — the connection closed, nothing relayed: a client without a certificate or with one the
 * client CA did not sign (the TLS layer refuses it), a certificate that does not name exactly one
 * node id, a node not in `api.nodes` (when set), a node the hub's fleet trust does not admit
 * (`admits`: revoked, a door — whatever `api.nodes` or `doors.nodes` say —, a certificate not its
 * current one), no ALPN, or ALPN naming a port not in the pool. The port is checked twice: by
 * `ALPNCallback` during the handshake (against the pool as it is then, so a pool that grows or
 * shrinks needs no new server) and again after it.
 *
 * A relayed stream ends with its node (`node_streams.ts`): at each revocation look the hub asks
 * `admits` again and destroys both sockets of every stream no longer admitted, and a stream open
 * for `transport.max_stream_seconds` is ended the same way (the edge's pool dials a new one).
 *
 * Measured on Deno 2.9.6 before choosing ALPN: a `node:tls` server with `ALPNProtocols` selects a
 * matching protocol and answers an unknown one with the `no_application_protocol` alert; with
 * `ALPNCallback`, returning no protocol ends the handshake (the client sees the socket close
 * before the handshake finished); a client offering no ALPN completes the handshake with
 * `alpnProtocol === false`, which the relay then refuses.
 *
 * Active streams are counted per port, and every change is told to the pool's optional `report`
 * hook (the embedded Tor pool's scaler reads it).
 *
 * @module
 */
import tls from "node:tls";
import { holdTlsReads } from "../egress/tls_reads.ts";
import { certificateNode, NODE_ID, type RevocationCheck } from "./auth.ts";
import { type Admits, NodeStreams, type StreamEnd } from "./node_streams.ts";
import { pipeToPool, PortStreams } from "./pool_pipe.ts";

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

/** The ALPN protocol prefix; the port follows it. */
const ALPN_PREFIX = "portcullis-socks/";

/** The pool port an ALPN protocol names, if it names one. */
export function portOfAlpn(protocol: string | false | null | undefined): number | undefined {
  if (typeof protocol !== "string" || !protocol.startsWith(ALPN_PREFIX)) return undefined;
  const digits = protocol.slice(ALPN_PREFIX.length);
  if (!/^[1-9]\d{0,4}$/.test(digits)) return undefined;
  const port = Number(digits);
  return port <= 65535 ? port : undefined;
}

/** Why a connection was closed without being relayed. */
export type RelayRefusal = "alpn" | "node" | "upstream";

/** What the relay is made from. */
export interface SocksRelayOptions {
  readonly pool: PoolPorts;
  /** PEM: the hub's certificate and key, and the CA that signs nodes' client certificates. */
  readonly tls: { readonly cert: string; readonly key: string; readonly ca: string };
  /** Nodes allowed (`api.nodes`); undefined allows every node the CA signed. */
  readonly nodes?: readonly string[];
  /** The fleet CA's revocations: a revoked certificate is refused like an unknown one. */
  readonly revocations?: RevocationCheck;
  /** The fleet trust's check of a node and its certificate serial, at connect and at each look. */
  readonly admits?: Admits;
  /** The longest a relayed stream stays open, in ms (none: no bound). */
  readonly maxStreamMs?: number;
  /** Time allowed for the TLS handshake, and for the connect to the pool instance. */
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
  readonly #refused: Record<RelayRefusal, number> = { alpn: 0, node: 0, upstream: 0 };
  readonly #loggedAt: Record<RelayRefusal, number> = {
    alpn: -Infinity,
    node: -Infinity,
    upstream: -Infinity,
  };

  /** @param options the pool, the TLS credentials, the node allowlist, the time bound, the log */
  constructor(options: SocksRelayOptions) {
    this.#options = options;
    this.#streams = new PortStreams(options.pool);
    this.#nodes = new NodeStreams({ admits: options.admits, maxLifetimeMs: options.maxStreamMs });
    const { pool, tls: credentials, timeoutMs } = options;
    this.server = tls.createServer({
      ...credentials,
      requestCert: true,
      rejectUnauthorized: true,
      minVersion: "TLSv1.2",
      handshakeTimeout: timeoutMs,
      ALPNCallback: function choosePoolPort({ protocols }) {
        const ports = pool.ports();
        return protocols.find((protocol) => {
          const port = portOfAlpn(protocol);
          return port !== undefined && ports.includes(port);
        });
      },
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

  /** A finished handshake: checks the port and the node, then relays. */
  async #accept(socket: tls.TLSSocket): Promise<void> {
    socket.on("error", () => socket.destroy());
    holdTlsReads(socket); // nothing read past the kernel's buffers while admission is asked
    const port = portOfAlpn(socket.alpnProtocol);
    if (port === undefined || !this.#options.pool.ports().includes(port)) {
      return this.#refuse(socket, "alpn", `ALPN ${JSON.stringify(socket.alpnProtocol)}`);
    }
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
    this.#relay(socket, port);
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
    socket.destroy();
    this.#refused[reason]++;
    const now = Date.now();
    if (now - this.#loggedAt[reason] < LOG_INTERVAL_MS) return;
    this.#loggedAt[reason] = now;
    this.#options.log(
      `portcullis: hub socks5_tls: connection from ${socket.remoteAddress} refused (${reason}: ` +
        `${detail}; ${this.#refused[reason]} since start; logged at most once a minute)`,
    );
  }
}
