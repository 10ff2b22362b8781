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
import { type AuthResult, NODE_ID, type NodeAuthenticator } from "./auth.ts";
import type { Enrolment } from "./enrolment.ts";
import type { Revocations } from "./revocation.ts";
import { DOOR_STREAM_PATH, type DoorService } from "./mirrors/service.ts";
import type { HubConfig } from "./config.ts";
import type { ConfigFeed } from "./feed.ts";
import type { TlsRefusals } from "./listeners.ts";

/**
 * What the hub knows about one node that follows it.
 *
 * @internal
 */
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
  /** What is revoked; each look ends the held polls of nodes revoked since they were admitted. */
  readonly revocations: Revocations;
  /** Registration and renewal, with the fleet CA (`ca`). */
  readonly enrolment?: Enrolment;
  /** The type the fleet CA issued a node as (`edge`, `door`), when it knows. */
  readonly nodeTypeOf: (nodeId: string) => Promise<string | undefined>;
  /** The door stream, when `doors` is configured. */
  readonly doors?: DoorService;
}

/** A poll being held, and how to learn whether its credential was revoked meanwhile. */
interface HeldPoll {
  readonly revoked: () => Promise<boolean>;
  readonly end: () => void;
}

/** The hub's routes and the state they share: the nodes seen, and the signal that stops holds. */
export class HubRoutes {
  readonly nodes = new Map<string, NodeRecord>();
  readonly #options: HubRoutesOptions;
  readonly #stopping = new AbortController();
  readonly #held = new Set<HeldPoll>();

  /** @param options the generations, feed, reloader and authenticator the routes serve from */
  constructor(options: HubRoutesOptions) {
    this.#options = options;
    options.revocations.onLook(() => void this.#endRevoked());
  }

  /** Ends every held poll whose credential has been revoked (it is answered `node_revoked`). */
  async #endRevoked(): Promise<void> {
    for (const poll of [...this.#held]) {
      if (await poll.revoked()) poll.end();
    }
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
      revocation: this.#options.revocations.status(),
      doors: this.#options.doors?.status() ?? null,
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
    const enrolment = this.#options.enrolment;
    if (enrolment && url.pathname.startsWith("/v1/nodes/")) {
      return await this.#enrol(enrolment, request, url, requestId, authenticate);
    }
    const doors = this.#options.doors;
    if (doors && url.pathname === DOOR_STREAM_PATH) {
      return await this.#answerDoor(doors, request, url, response, requestId, authenticate);
    }
    const auth: { result?: AuthResult } = {};
    const refusal = await this.#refusePoll(request, url, authenticate, auth);
    if (refusal) return failureReply(refusal, requestId);
    if (url.pathname === "/v1/pool") return jsonReply({ backends: this.#options.pool?.() ?? [] });
    return await this.#answerPoll(url, response, requestId, auth.result);
  }

  /**
   * `POST /v1/nodes/register` (a secret, no certificate) and `POST /v1/nodes/renew` (a node
   * authenticated by its certificate, `?node_id=`, allowed by `api.nodes`).
   */
  async #enrol(
    enrolment: Enrolment,
    request: IncomingMessage,
    url: URL,
    requestId: string,
    authenticate: NodeAuthenticator,
  ): Promise<Reply> {
    const path = url.pathname;
    if (path !== "/v1/nodes/register" && path !== "/v1/nodes/renew") {
      return failureReply("route_not_allowed", requestId);
    }
    if (request.method !== "POST") return failureReply("method_not_allowed", requestId);
    if (path === "/v1/nodes/register") return await enrolment.register(request, requestId);
    const nodeId = url.searchParams.get("node_id") ?? "";
    if (!NODE_ID.test(nodeId)) return failureReply("bad_node_id", requestId);
    const auth = await authenticate(request, nodeId);
    if (!auth.ok) return failureReply(auth.kind, requestId);
    const allowed = this.#options.config.api.nodes;
    if (allowed && !allowed.includes(nodeId)) return failureReply("node_not_allowed", requestId);
    return await enrolment.renew(request, requestId, nodeId);
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
      await this.#options.doors?.reload();
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
    out: { result?: AuthResult },
  ): Promise<FailureKind | undefined> {
    const pool = url.pathname === "/v1/pool" && this.#options.pool !== undefined;
    if (url.pathname !== "/v1/config/stream" && !pool) return "route_not_allowed";
    if (!isRead(request)) return "method_not_allowed";
    const nodeId = url.searchParams.get("node_id") ?? "";
    if (!NODE_ID.test(nodeId)) return "bad_node_id";
    const auth = await authenticate(request, nodeId);
    if (!auth.ok) return auth.kind;
    out.result = auth;
    const allowed = this.#options.config.api.nodes;
    if (allowed && !allowed.includes(nodeId)) return "node_not_allowed";
    // A door never gets the tenant set (backends, onion addresses) or the pool.
    if (await this.#isDoor(nodeId)) return "node_not_allowed";
    return undefined;
  }

  /** True when the node follows as a door (`doors.nodes`, or the type the CA issued it as). */
  async #isDoor(nodeId: string): Promise<boolean> {
    const doors = this.#options.doors;
    if (!doors) return (await this.#options.nodeTypeOf(nodeId)) === "door";
    return doors.isDoorNode(nodeId, await this.#options.nodeTypeOf(nodeId));
  }

  /**
   * `GET /v1/doors/stream` for an authenticated door (method, node id, credential, allow-list, door
   * type in that order), held like a config poll and ended `node_revoked` the same way.
   */
  async #answerDoor(
    doors: DoorService,
    request: IncomingMessage,
    url: URL,
    response: ServerResponse,
    requestId: string,
    authenticate: NodeAuthenticator,
  ): Promise<Reply | undefined> {
    if (!isRead(request)) return failureReply("method_not_allowed", requestId);
    const nodeId = url.searchParams.get("node_id") ?? "";
    if (!NODE_ID.test(nodeId)) return failureReply("bad_node_id", requestId);
    const auth = await authenticate(request, nodeId);
    if (!auth.ok) return failureReply(auth.kind, requestId);
    const allowed = this.#options.config.api.nodes;
    if (allowed && !allowed.includes(nodeId)) return failureReply("node_not_allowed", requestId);
    if (!doors.isDoorNode(nodeId, await this.#options.nodeTypeOf(nodeId))) {
      return failureReply("node_not_allowed", requestId);
    }
    return await this.#revocable(auth, requestId, (signal) => doors.answer(url, response, signal));
  }

  /**
   * Runs a held answer, ending it `node_revoked` if the credential it was admitted with is revoked
   * meanwhile (each revocation look asks).
   */
  async #revocable(
    auth: AuthResult | undefined,
    requestId: string,
    answer: (signal: AbortSignal) => Promise<Reply | undefined>,
  ): Promise<Reply | undefined> {
    const revoked = new AbortController();
    const held: HeldPoll = {
      revoked: auth?.ok && auth.revoked ? auth.revoked : () => Promise.resolve(false),
      end: () => revoked.abort(),
    };
    this.#held.add(held);
    try {
      const reply = await answer(revoked.signal);
      return revoked.signal.aborted && reply ? failureReply("node_revoked", requestId) : reply;
    } finally {
      this.#held.delete(held);
    }
  }

  /**
   * Records an admitted poll's node and answers it from the feed, held unless `wait=0`; no reply
   * when the client went away while it was held, `node_revoked` when its credential was revoked
   * while it was held.
   */
  async #answerPoll(
    url: URL,
    response: ServerResponse,
    requestId: string,
    auth: AuthResult | undefined,
  ): Promise<Reply | undefined> {
    const nodeId = url.searchParams.get("node_id")!;
    const have = url.searchParams.get("have") ?? "";
    const hold = url.searchParams.get("wait") === "0" ? 0 : this.#options.config.holdMs;
    const record = this.nodes.get(nodeId) ??
      { node_id: nodeId, last_seen: "", have: "", served_generation: 0, holding: false, polls: 0 };
    this.nodes.set(nodeId, record);
    Object.assign(record, { last_seen: new Date().toISOString(), have, holding: true });
    record.polls++;
    return await this.#revocable(auth, requestId, async (revoked) => {
      const gone = new AbortController();
      const onClose = () => gone.abort();
      response.once("close", onClose);
      const signal = AbortSignal.any([gone.signal, this.#stopping.signal, revoked]);
      const answer = await this.#options.feed.answer(have, hold, signal);
      response.off("close", onClose);
      record.holding = false;
      if (gone.signal.aborted) return undefined;
      record.served_generation = answer.generation;
      return jsonReply(answer);
    });
  }
}

function isRead(request: IncomingMessage): boolean {
  return request.method === "GET" || request.method === "HEAD";
}
