/**
 * What the hub's listeners answer. `api` serves the edges' config stream (and so does the
 * `https_tunnel` endpoint, authenticating by client certificate whatever `api` uses): a poll passes route,
 * method, node id, credential and allow-list in that order (a node id that is no file name is
 * refused before any credential is looked at), is recorded as a node, then held until the set
 * changes, the hold ends, the client goes or the hub stops. `health` (loopback) serves status,
 * nodes and reload. Each answers only its own routes; every refusal is a kind from the shared
 * failure table, written by `src/request/write_reply.ts`.
 *
 * @module
 */
import type { IncomingMessage, ServerResponse } from "node:http";
import { configStatus, type ConfigStore } from "../live/generations.ts";
import type { RuntimeReloader } from "../live/runtime_watch.ts";
import { formatPath } from "../config/problems.ts";
import { type FailureKind, failureReply } from "../request/errors.ts";
import { jsonReply, type Reply } from "../request/reply.ts";
import { NODE_ID, type NodeAuthenticator } from "./auth.ts";
import type { HubConfig } from "./config.ts";
import type { ConfigFeed } from "./feed.ts";
import type { TlsRefusals } from "./listeners.ts";

/** What the hub knows about one node that follows it. */
export interface NodeRecord {
  readonly node_id: string;
  /** When its last poll arrived. */
  last_seen: string;
  /** The hash it said it had. */
  have: string;
  /** The generation it was last sent (or told is current). */
  served_generation: number;
  /** A poll of it is held right now. */
  holding: boolean;
  polls: number;
}

/** What the routes read and act on, all made at boot. */
export interface HubRoutesOptions {
  readonly config: HubConfig;
  readonly store: ConfigStore;
  readonly feed: ConfigFeed;
  readonly reloader: RuntimeReloader;
  readonly authenticate: NodeAuthenticator;
  /** The pool's own view of its SOCKS ports (`/v1/pool`), when the hub has a pool. */
  readonly pool?: () => readonly { port: number; latencyMs?: number | null; errors?: number }[];
  /** The listeners' count of refused TLS handshakes, shown in status. */
  readonly refusals: TlsRefusals;
}

/** The hub's routes and the state they share: the nodes seen, and the signal that stops holds. */
export class HubRoutes {
  readonly nodes = new Map<string, NodeRecord>();
  readonly #options: HubRoutesOptions;
  readonly #stopping = new AbortController();

  /** @param options the generations, feed, reloader and authenticator the routes serve from */
  constructor(options: HubRoutesOptions) {
    this.#options = options;
  }

  /** Releases every held poll (the hub is stopping). */
  stop(): void {
    this.#stopping.abort();
  }

  /** The hub's state for `/v1/config`: its generations, held polls, refused handshakes, nodes. */
  status(): Record<string, unknown> {
    const { config, store, feed, refusals } = this.#options;
    return {
      node_id: config.nodeId,
      ...configStatus(store, (p) => formatPath(p.path)),
      held_polls: feed.waiting,
      tls_refused: refusals.count,
      nodes: [...this.nodes.values()],
    };
  }

  /**
   * The api listener: `/healthz`, and the config stream for an authenticated, allowed node.
   *
   * @param authenticate how the node proves who it is (default: the api's way)
   */
  async api(
    request: IncomingMessage,
    response: ServerResponse,
    requestId: string,
    authenticate: NodeAuthenticator = this.#options.authenticate,
  ): Promise<Reply | undefined> {
    const url = new URL(request.url ?? "/", "http://hub");
    if (url.pathname === "/healthz" && isRead(request)) return jsonReply({ status: "ok" });
    const refusal = await this.#refusePoll(request, url, authenticate);
    if (refusal) return failureReply(refusal, requestId);
    if (url.pathname === "/v1/pool") return jsonReply({ backends: this.#options.pool?.() ?? [] });
    return await this.#answerPoll(url, response);
  }

  /** The health listener (loopback): `/healthz`, status, nodes, and reload on POST. */
  async health(
    request: IncomingMessage,
    _response: ServerResponse,
    requestId: string,
  ): Promise<Reply> {
    const path = new URL(request.url ?? "/", "http://hub").pathname;
    if (path === "/healthz" && isRead(request)) return jsonReply({ status: "ok" });
    if (path === "/v1/config" && isRead(request)) return jsonReply(this.status());
    if (path === "/v1/nodes" && isRead(request)) {
      return jsonReply({ nodes: [...this.nodes.values()] });
    }
    if (path === "/v1/config/reload" && request.method === "POST") {
      const outcome = await this.#options.reloader.reload();
      const status = outcome.outcome === "rejected" ? 422 : 200;
      return jsonReply({ outcome: outcome.outcome, ...this.status() }, status);
    }
    return failureReply("route_not_allowed", requestId);
  }

  /**
   * Why a stream poll (or a read of the pool's view, `/v1/pool`) is refused: route, method, node id,
   * credential, allow-list.
   */
  async #refusePoll(
    request: IncomingMessage,
    url: URL,
    authenticate: NodeAuthenticator,
  ): Promise<FailureKind | undefined> {
    const pool = url.pathname === "/v1/pool" && this.#options.pool !== undefined;
    if (url.pathname !== "/v1/config/stream" && !pool) return "route_not_allowed";
    if (!isRead(request)) return "method_not_allowed";
    const nodeId = url.searchParams.get("node_id") ?? "";
    if (!NODE_ID.test(nodeId)) return "bad_node_id";
    const auth = await authenticate(request, nodeId);
    if (!auth.ok) return auth.kind;
    const allowed = this.#options.config.api.nodes;
    if (allowed && !allowed.includes(nodeId)) return "node_not_allowed";
    return undefined;
  }

  /**
   * Records an admitted poll's node and answers it from the feed, held unless `wait=0`; no reply
   * when the client went away while it was held.
   */
  async #answerPoll(url: URL, response: ServerResponse): Promise<Reply | undefined> {
    const nodeId = url.searchParams.get("node_id")!;
    const have = url.searchParams.get("have") ?? "";
    const hold = url.searchParams.get("wait") === "0" ? 0 : this.#options.config.holdMs;
    const record = this.nodes.get(nodeId) ??
      { node_id: nodeId, last_seen: "", have: "", served_generation: 0, holding: false, polls: 0 };
    this.nodes.set(nodeId, record);
    Object.assign(record, { last_seen: new Date().toISOString(), have, holding: true });
    record.polls++;
    const gone = new AbortController();
    const onClose = () => gone.abort();
    response.once("close", onClose);
    const signal = AbortSignal.any([gone.signal, this.#stopping.signal]);
    const answer = await this.#options.feed.answer(have, hold, signal);
    response.off("close", onClose);
    record.holding = false;
    record.served_generation = answer.generation;
    return gone.signal.aborted ? undefined : jsonReply(answer);
  }
}

function isRead(request: IncomingMessage): boolean {
  return request.method === "GET" || request.method === "HEAD";
}
