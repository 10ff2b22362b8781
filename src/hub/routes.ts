/**
 * What the hub's routes act on: the nodes seen, the polls held, status, reload, and the answers of
 * the config stream, the door stream and the pool's view. Which request reaches which answer —
 * routes, methods, query and body checks, credentials, allow-lists — is the Hono apps' job
 * (`hub_app.ts`); this class is what they call once a request has passed them. A held poll is
 * answered when the set changes, the hold ends, the client goes or the hub stops, and ended
 * `node_revoked` when its credential is revoked meanwhile.
 *
 * @module
 */
import type { ServerResponse } from "node:http";
import { configStatus, type ConfigStore } from "../live/generations.ts";
import type { RuntimeReloader } from "../live/runtime_watch.ts";
import { formatPath } from "../config/problems.ts";
import { failureReply } from "../request/errors.ts";
import { jsonReply, type Reply } from "../request/reply.ts";
import type { AuthResult, NodeAuthenticator } from "./auth.ts";
import type { Enrolment } from "./enrolment.ts";
import type { NodeStanding } from "./node_standing.ts";
import type { Revocations } from "./revocation.ts";
import type { DoorService } from "./mirrors/service.ts";
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
  /** The hash it said it serves. */
  have: string;
  /** The hash of a set it said it received but does not serve (pending or refused), or "". */
  seen: string;
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
  /** Each node's registered type and standing (and `doors.nodes`): who is a door. */
  readonly standing: NodeStanding;
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
  readonly options: HubRoutesOptions;
  readonly #stopping = new AbortController();
  readonly #held = new Set<HeldPoll>();

  /** @param options the generations, feed, reloader and authenticator the routes serve from */
  constructor(options: HubRoutesOptions) {
    this.options = options;
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
    const { config, store, feed, refusals } = this.options;
    return {
      node_id: config.nodeId,
      ...configStatus(store, (p) => formatPath(p.path)),
      held_polls: feed.waiting,
      tls_refused: refusals.count,
      revocation: this.options.revocations.status(),
      doors: this.options.doors?.status() ?? null,
      // `current`: the node serves the live set (its `have`, never a set it only received).
      nodes: [...this.nodes.values()].map((node) => ({
        ...node,
        current: node.have === feed.live.hash,
      })),
    };
  }

  /** The pool's view (`/v1/pool`): its SOCKS ports, with latency and errors when it knows. */
  pool(): Reply {
    return jsonReply({ backends: this.options.pool?.() ?? [] });
  }

  /** `POST /v1/config/reload` on the health listener: reads the folder (and the doors) now. */
  async reload(): Promise<Reply> {
    const outcome = await this.options.reloader.reload();
    await this.options.doors?.reload();
    const status = outcome.outcome === "rejected" ? 422 : 200;
    return jsonReply({ outcome: outcome.outcome, ...this.status() }, status);
  }

  /**
   * True when the node is a door — registered by the CA as one, or listed in `doors.nodes` — and
   * so never gets the tenant set or the pool (node_standing.ts).
   */
  isDoor(nodeId: string): Promise<boolean> {
    return Promise.resolve(this.options.standing.isDoor(nodeId));
  }

  /**
   * True when the node may follow the door stream: registered by the CA as a door (and listed when
   * `doors.nodes` is set); without the CA, listed.
   */
  mayFollowDoors(nodeId: string): boolean {
    return this.options.standing.mayFollowDoors(nodeId);
  }

  /**
   * `GET /v1/doors/stream` for a door that passed its checks: held like a config poll and ended
   * `node_revoked` the same way.
   */
  async answerDoor(
    doors: DoorService,
    url: URL,
    response: ServerResponse,
    held: { readonly requestId: string; readonly auth: AuthResult | undefined },
  ): Promise<Reply | undefined> {
    const answer = (signal: AbortSignal) => doors.answer(url, response, signal);
    return await this.#revocable(held.auth, held.requestId, answer);
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
  async answerPoll(
    poll: {
      readonly nodeId: string;
      readonly have: string;
      readonly seen?: string;
      readonly wait?: string;
    },
    response: ServerResponse,
    held: { readonly requestId: string; readonly auth: AuthResult | undefined },
  ): Promise<Reply | undefined> {
    const { nodeId, have, seen = "" } = poll;
    const hold = poll.wait === "0" ? 0 : this.options.config.holdMs;
    const record = this.nodes.get(nodeId) ??
      {
        node_id: nodeId,
        last_seen: "",
        have: "",
        seen: "",
        served_generation: 0,
        holding: false,
        polls: 0,
      };
    this.nodes.set(nodeId, record);
    Object.assign(record, { last_seen: new Date().toISOString(), have, seen, holding: true });
    record.polls++;
    return await this.#revocable(held.auth, held.requestId, async (revoked) => {
      const gone = new AbortController();
      const onClose = () => gone.abort();
      response.once("close", onClose);
      const signal = AbortSignal.any([gone.signal, this.#stopping.signal, revoked]);
      const answer = await this.options.feed.answer({ have, seen }, hold, signal);
      response.off("close", onClose);
      record.holding = false;
      if (gone.signal.aborted) return undefined;
      record.served_generation = answer.generation;
      return jsonReply(answer);
    });
  }
}
