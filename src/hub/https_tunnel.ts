/**
 * The hub's side of the `https_tunnel` transport: the `upgrade` handler of a mutual-TLS HTTPS
 * listener (made by `listeners.ts`, whose ordinary requests are the api routes — the config stream
 * is served on the same endpoint). An edge opens one WebSocket per SOCKS connection with
 * `GET /v1/tunnel` (RFC 6455 §4.1), sends one text message `{"op":"dial","port":N}` naming a pool
 * port, and from then on the binary messages carry the SOCKS5 stream to `<pool host>:<port>`
 * unchanged, both ways — as the `socks5_tls` relay pipes it (`socks_relay.ts`), so the edge's
 * breakers, scorer and negative cache judge each pool port the same way.
 *
 * Refused before the upgrade, with an HTTP answer from the shared failure table (`node`): a
 * certificate that does not name exactly one node id, a node not in `api.nodes`, a node the hub's
 * fleet trust does not admit (`admits`: revoked, a door — whatever `api.nodes` or `doors.nodes`
 * say —, a certificate not its current one), asked last; (`request`) another path or method, or
 * not a valid WebSocket upgrade (`tunnel_request.ts` says what a tunnel request must be). A client
 * without a certificate or with another CA's never finishes the TLS handshake. Refused after it,
 * with close code 1008: a first message that is not text, not the dial op, or names a port not in
 * the pool now (`dial`); no dial op within the time bound (`dial`); a framing violation closes
 * with 1002 or 1009 (`protocol`); a pool instance that cannot be reached closes with 1011
 * (`upstream`).
 *
 * Active streams are counted per port and every change is told to the pool's `report` hook, like
 * the relay's. A stream ends with its node (`node_streams.ts`): at each revocation look the hub asks
 * `admits` again and closes every stream no longer admitted with 1008; a stream open for
 * `transport.max_stream_seconds` is closed with 1001 (the edge dials a new one for its next
 * request). Control frames are paced by the stream (`ws_stream.ts`): a node that pings and never
 * reads stops being read from, and one that makes the hub hold too much is closed with 1008. A
 * node that sends frames without data (pings, pongs, empty binary frames) beyond the stream's
 * budget (`ws_pacing.ts` `ControlBudget`) is closed with 1008 at once and read no further — one
 * tunnel's pongs, read at line rate, used to slow every other node's requests — and counted as a
 * `protocol` refusal.
 *
 * @module
 */
import type { Buffer } from "node:buffer";
import type { IncomingMessage } from "node:http";
import type net from "node:net";
import type { Duplex } from "node:stream";
import type { TLSSocket } from "node:tls";
import { holdTlsReads } from "../egress/tls_reads.ts";
import { acceptFor, CloseCode } from "../egress/ws_frame.ts";
import { OVER_CONTROL_BUDGET } from "../egress/ws_pacing.ts";
import { WebSocketStream } from "../egress/ws_stream.ts";
import { anonymizeIp } from "../observe/anonymize.ts";
import { failureReply } from "../request/errors.ts";
import { requestIdFor } from "../request/request_id.ts";
import { renderHead, writeRawReply } from "../server/raw_reply.ts";
import { certificateNode, NODE_ID, type RevocationCheck } from "./auth.ts";
import { type Admits, NodeStreams, type StreamEnd } from "./node_streams.ts";
import type { PoolPorts } from "./socks_relay.ts";
import { pipeToPool, PortStreams } from "./pool_pipe.ts";
import { dialPort, type Refused, refuseRequest, type TunnelRefusal } from "./tunnel_request.ts";

export { TUNNEL_PATH } from "../egress/tunnel_dial.ts";
export { dialPort, type TunnelRefusal, tunnelRoute } from "./tunnel_request.ts";

/** What the tunnel is made from. */
export interface HttpsTunnelOptions {
  readonly pool: PoolPorts;
  /** Nodes allowed (`api.nodes`); undefined allows every node the CA signed. */
  readonly nodes?: readonly string[];
  /** The fleet CA's revocations: a revoked certificate is refused like an unknown one. */
  readonly revocations?: RevocationCheck;
  /** The fleet trust's check of a node and its certificate serial, at upgrade and at each look. */
  readonly admits?: Admits;
  /** The longest a tunnel stays open, in ms (none: no bound). */
  readonly maxStreamMs?: number;
  /** Time allowed for the dial op after the upgrade, and for the connect to the pool instance. */
  readonly timeoutMs: number;
  /** The largest WebSocket frame payload accepted (default 1 MiB). */
  readonly maxFrameBytes?: number;
  /** Where refusals are logged (at most once a minute per reason). */
  readonly log: (line: string) => void;
}

const REASONS: readonly TunnelRefusal[] = ["node", "request", "dial", "protocol", "upstream"];

/** Refusals are counted always and logged at most this often per reason. */
const LOG_INTERVAL_MS = 60_000;

/**
 * The tunnel endpoint's upgrade handler and its stream counts.
 *
 * @internal
 */
export class HttpsTunnel {
  readonly #options: HttpsTunnelOptions;
  readonly #streams: PortStreams;
  readonly #nodes: NodeStreams;
  readonly #refused = Object.fromEntries(REASONS.map((r) => [r, 0])) as Record<
    TunnelRefusal,
    number
  >;
  readonly #loggedAt = Object.fromEntries(REASONS.map((r) => [r, -Infinity])) as Record<
    TunnelRefusal,
    number
  >;

  /** @param options the pool, the node allowlist, the time bound, the log */
  constructor(options: HttpsTunnelOptions) {
    this.#options = options;
    this.#streams = new PortStreams(options.pool);
    this.#nodes = new NodeStreams({ admits: options.admits, maxLifetimeMs: options.maxStreamMs });
  }

  /** Streams relayed to `port` right now. */
  active(port: number): number {
    return this.#streams.active(port);
  }

  /**
   * Counts for status: streams per port now, streams relayed since start, refusals by reason, and
   * tunnels the hub ended (`revoked`: their node no longer admitted; `lifetime`).
   */
  snapshot(): {
    active: Record<string, number>;
    relayed: number;
    refused: Record<TunnelRefusal, number>;
    ended: Record<StreamEnd, number>;
  } {
    return {
      ...this.#streams.counts(),
      refused: { ...this.#refused },
      ended: this.#nodes.counts().ended,
    };
  }

  /**
   * Asks again whether each open tunnel's node is admitted, and closes those that are not (told
   * after every revocation look).
   */
  async recheck(): Promise<void> {
    const ended = await this.#nodes.recheck();
    if (ended > 0) {
      this.#options.log(
        `portcullis: hub https_tunnel: closed ${ended} stream(s) of nodes no longer admitted`,
      );
    }
  }

  /**
   * The server's `upgrade` event: checks the node and the request, answers 101, then waits for
   * the dial op.
   */
  upgrade(request: IncomingMessage, socket: Duplex, head: Buffer): void {
    socket.on("error", () => socket.destroy());
    holdTlsReads(socket as TLSSocket);
    socket.pause(); // until admitted: nothing is read meanwhile
    this.#upgrade(request, socket as TLSSocket, head).catch(() => socket.destroy());
  }

  /** The upgrade's checks (the node's admission asked last), then the 101 and the stream. */
  async #upgrade(request: IncomingMessage, socket: TLSSocket, head: Buffer): Promise<void> {
    const requestId = requestIdFor(request.headers["x-request-id"]);
    const node = certificateNode(socket, this.#options.revocations);
    let refusal = this.#refuseNode(node) ?? refuseRequest(request);
    const opened: { stream?: WebSocketStream } = {};
    const release = refusal || !node.ok ? undefined : await this.#nodes.open(node, (why) => {
      const stream = opened.stream;
      if (!stream) return socket.destroy();
      if (why === "revoked") stream.refuse(CloseCode.policyViolation, "Node no longer admitted");
      else stream.refuse(CloseCode.goingAway, "Stream lifetime reached");
    });
    if (!refusal && !release) refusal = { kind: "node_not_allowed", reason: "node" };
    if (refusal) {
      const { kind, reason, status, headers } = refusal;
      const from = anonymizeIp(socket.remoteAddress); // before the reply may close the socket
      const reply = failureReply(kind, requestId, { status, headers });
      writeRawReply(
        socket,
        reply,
        { "x-request-id": requestId, "cache-control": "no-store" },
        () => {},
      );
      return this.#count(reason, `${kind} from ${from}`);
    }
    if (socket.destroyed) return release!();
    socket.once("close", release!);
    const key = request.headers["sec-websocket-key"] as string;
    socket.write(renderHead(101, [
      "upgrade",
      "websocket",
      "connection",
      "Upgrade",
      "sec-websocket-accept",
      acceptFor(key),
    ]));
    opened.stream = this.#open(socket, head);
    socket.resume();
  }

  /** A WebSocket whose first message must be the dial op, within the time bound. */
  #open(socket: Duplex, head: Buffer): WebSocketStream {
    const { timeoutMs, maxFrameBytes } = this.#options;
    const stream: WebSocketStream = new WebSocketStream({
      side: "server",
      maxFrameBytes,
      // A node that leaves a pong owed this long does not read: it is closed (1008).
      pongDeadlineMs: timeoutMs,
      firstText: (text) => {
        clearTimeout(timer);
        this.#dial(stream, text);
      },
    });
    const timer = setTimeout(() => {
      stream.refuse(CloseCode.policyViolation, "No dial op");
      this.#count("dial", `no dial op within ${timeoutMs} ms`);
    }, timeoutMs);
    stream.on("error", () => {});
    stream.once("close", () => {
      clearTimeout(timer);
      const closed = stream.wsClose;
      if (!closed?.refused) return;
      if (closed.code === CloseCode.policyViolation && closed.reason === "Expected the dial op") {
        this.#count("dial", "a binary message before the dial op");
      } else if (closed.reason === OVER_CONTROL_BUDGET) {
        this.#count("protocol", `${closed.code} ${closed.reason}`);
      } else if (closed.code !== CloseCode.policyViolation && closed.code !== 1011) {
        this.#count("protocol", `${closed.code} ${closed.reason}`);
      }
    });
    stream.attach(socket as net.Socket, head);
    return stream;
  }

  /** The dial op: a port in the pool is relayed to; anything else closes with 1008. */
  #dial(stream: WebSocketStream, text: string): void {
    const port = dialPort(text);
    if (port === undefined || !this.#options.pool.ports().includes(port)) {
      stream.refuse(CloseCode.policyViolation, "Not a dial op for a pool port");
      return this.#count("dial", `first message ${JSON.stringify(text.slice(0, 60))}`);
    }
    this.#relay(stream, port);
  }

  /** Pipes the stream to the pool instance and back, counting it while it lasts. */
  #relay(client: WebSocketStream, port: number): void {
    const { pool, timeoutMs } = this.#options;
    pipeToPool(client, { host: pool.hostname, port }, timeoutMs, {
      ...this.#streams.hooks(port),
      unreachable: (error) => {
        // The close frame goes out before the connection ends (the edge then sees why).
        client.refuse(1011, "The pool instance cannot be reached");
        this.#count("upstream", `pool port ${port}: ${error.message}`);
      },
    });
  }

  /** Why the certificate's node may not tunnel, if it may not (before asking `admits`). */
  #refuseNode(node: ReturnType<typeof certificateNode>): Refused | undefined {
    if (!node.ok) return { kind: node.kind, reason: "node" };
    const allowed = this.#options.nodes;
    if (!NODE_ID.test(node.node)) return { kind: "unauthenticated", reason: "node" };
    if (allowed && !allowed.includes(node.node)) {
      return { kind: "node_not_allowed", reason: "node" };
    }
    return undefined;
  }

  /** Counts a refusal; logged at most once a minute per reason. */
  #count(reason: TunnelRefusal, detail: string): void {
    this.#refused[reason]++;
    const now = Date.now();
    if (now - this.#loggedAt[reason] < LOG_INTERVAL_MS) return;
    this.#loggedAt[reason] = now;
    this.#options.log(
      `portcullis: hub https_tunnel: stream refused (${reason}: ${detail}; ` +
        `${this.#refused[reason]} since start; logged at most once a minute)`,
    );
  }
}
