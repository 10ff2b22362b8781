/**
 * The hub's side of the `https_tunnel` transport: the `upgrade` handler of a mutual-TLS HTTPS
 * listener (made by `listeners.ts`, whose ordinary requests are the api routes — the config stream
 * is served on the same endpoint). An edge opens one WebSocket per SOCKS connection with
 * `GET /v1/tunnel` (RFC 6455 §4.1), sends one text message `{"op":"dial","port":N}` naming a pool
 * port, and from then on the binary messages carry the SOCKS5 stream to `<pool host>:<port>`
 * unchanged, both ways — as the `socks5_tls` relay pipes it (`socks_relay.ts`), so the edge's
 * breakers, scorer and negative cache judge each pool port the same way.
 *
 * Refused before the upgrade, with an HTTP answer from the shared failure table: a certificate
 * that does not name exactly one node id, a node not in `api.nodes` (`node`); another path or
 * method, or not a valid WebSocket upgrade — `Upgrade: websocket`, a 16-byte
 * `Sec-WebSocket-Key`, `Sec-WebSocket-Version: 13` (`request`). A client without a certificate
 * or with another CA's never finishes the TLS handshake. Refused after it, with close code 1008: a
 * first message that is not text, not the dial op, or names a port not in the pool now (`dial`);
 * no dial op within the time bound (`dial`); a framing violation closes with 1002 or 1009
 * (`protocol`); a pool instance that cannot be reached closes with 1011 (`upstream`).
 *
 * Active streams are counted per port and every change is told to the pool's `report` hook, like
 * the relay's.
 *
 * @module
 */
import type { Buffer } from "node:buffer";
import type { IncomingMessage } from "node:http";
import type net from "node:net";
import type { Duplex } from "node:stream";
import type { TLSSocket } from "node:tls";
import { TUNNEL_PATH } from "../egress/tunnel_dial.ts";
import { acceptFor, CloseCode, isWebSocketKey } from "../egress/ws_frame.ts";
import { WebSocketStream } from "../egress/ws_stream.ts";
import { type FailureKind, failureReply } from "../request/errors.ts";
import { requestIdFor } from "../request/request_id.ts";
import { renderHead, writeRawReply } from "../server/raw_reply.ts";
import { certificateNode, NODE_ID, type RevocationCheck } from "./auth.ts";
import type { HubRoute } from "./listeners.ts";
import type { PoolPorts } from "./socks_relay.ts";
import { pipeToPool, PortStreams } from "./pool_pipe.ts";

export { TUNNEL_PATH } from "../egress/tunnel_dial.ts";

/** Why a tunnel was refused. */
export type TunnelRefusal = "node" | "request" | "dial" | "protocol" | "upstream";

/** What the tunnel is made from. */
export interface HttpsTunnelOptions {
  readonly pool: PoolPorts;
  /** Nodes allowed (`api.nodes`); undefined allows every node the CA signed. */
  readonly nodes?: readonly string[];
  /** The fleet CA's revocations: a revoked certificate is refused like an unknown one. */
  readonly revocations?: RevocationCheck;
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
  }

  /** Streams relayed to `port` right now. */
  active(port: number): number {
    return this.#streams.active(port);
  }

  /** Counts for status: streams per port now, streams relayed since start, refusals by reason. */
  snapshot(): {
    active: Record<string, number>;
    relayed: number;
    refused: Record<TunnelRefusal, number>;
  } {
    return {
      ...this.#streams.counts(),
      refused: { ...this.#refused },
    };
  }

  /**
   * The server's `upgrade` event: checks the node and the request, answers 101, then waits for
   * the dial op.
   */
  upgrade(request: IncomingMessage, socket: Duplex, head: Buffer): void {
    socket.on("error", () => socket.destroy());
    const requestId = requestIdFor(request.headers["x-request-id"]);
    const refusal = this.#refuseNode(socket as TLSSocket) ?? refuseRequest(request);
    if (refusal) {
      const { kind, reason, status, headers } = refusal;
      const reply = failureReply(kind, requestId, { status, headers });
      writeRawReply(
        socket,
        reply,
        { "x-request-id": requestId, "cache-control": "no-store" },
        () => {},
      );
      const who = (socket as TLSSocket).remoteAddress;
      return this.#count(reason, `${kind} from ${who}`);
    }
    const key = request.headers["sec-websocket-key"] as string;
    socket.write(renderHead(101, [
      "upgrade",
      "websocket",
      "connection",
      "Upgrade",
      "sec-websocket-accept",
      acceptFor(key),
    ]));
    this.#open(socket, head);
  }

  /** A WebSocket whose first message must be the dial op, within the time bound. */
  #open(socket: Duplex, head: Buffer): void {
    const { timeoutMs, maxFrameBytes } = this.#options;
    const stream: WebSocketStream = new WebSocketStream({
      side: "server",
      maxFrameBytes,
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
      } else if (closed.code !== CloseCode.policyViolation && closed.code !== 1011) {
        this.#count("protocol", `${closed.code} ${closed.reason}`);
      }
    });
    stream.attach(socket as net.Socket, head);
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

  /** Why the certificate's node may not tunnel, if it may not. */
  #refuseNode(socket: TLSSocket): Refused | undefined {
    const node = certificateNode(socket, this.#options.revocations);
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

/** A refusal before the upgrade: the failure kind, how it is counted, status and headers. */
interface Refused {
  readonly kind: FailureKind;
  readonly reason: TunnelRefusal;
  readonly status?: number;
  readonly headers?: Record<string, string>;
}

/** Why an upgrade request is not a tunnel request (RFC 6455 §4.2.1), if it is not. */
function refuseRequest(request: IncomingMessage): Refused | undefined {
  const path = new URL(request.url ?? "/", "http://hub").pathname;
  if (path !== TUNNEL_PATH) return { kind: "route_not_allowed", reason: "request" };
  if (request.method !== "GET") return { kind: "method_not_allowed", reason: "request" };
  const upgrade = String(request.headers.upgrade ?? "").toLowerCase();
  const key = request.headers["sec-websocket-key"];
  if (upgrade !== "websocket" || !isWebSocketKey(typeof key === "string" ? key : undefined)) {
    return { kind: "bad_request", reason: "request" };
  }
  if (request.headers["sec-websocket-version"] !== "13") {
    const headers = { "sec-websocket-version": "13" };
    return { kind: "bad_request", reason: "request", status: 426, headers };
  }
  return undefined;
}

/** The port of a dial op `{"op":"dial","port":N}` (those two keys only), if `text` is one. */
export function dialPort(text: string): number | undefined {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    return undefined;
  }
  if (typeof value !== "object" || value === null || Array.isArray(value)) return undefined;
  const { op, port, ...rest } = value as Record<string, unknown>;
  if (op !== "dial" || Object.keys(rest).length > 0) return undefined;
  return Number.isInteger(port) && (port as number) >= 1 && (port as number) <= 65535
    ? port as number
    : undefined;
}

/**
 * The endpoint's ordinary requests: `/v1/tunnel` without an upgrade is answered 426 (RFC 9110
 * §15.5.22) naming `websocket`; everything else is `api`'s.
 */
export function tunnelRoute(api: HubRoute): HubRoute {
  return function routeTunnelRequest(request, response, requestId) {
    const path = new URL(request.url ?? "/", "http://hub").pathname;
    if (path !== TUNNEL_PATH) return api(request, response, requestId);
    const headers = { upgrade: "websocket", connection: "Upgrade" };
    return Promise.resolve(failureReply("bad_request", requestId, { status: 426, headers }));
  };
}
