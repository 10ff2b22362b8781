/**
 * The door following its hub: `GET /v1/doors/stream` with the hash of the view held, answered with
 * a snapshot, a delta, or `current` after a hold. Each received view is rebuilt and checked against
 * the hub's hash (`view.ts`) before the door serves it; a view that does not check drops the base,
 * so the next poll asks for a snapshot. After a failure the door asks again after a backoff that
 * doubles from `backoff_initial_ms` up to `backoff_max_ms` (30 s at most), jittered over the
 * upper half so a fleet of doors does not return to a restarted hub in one burst.
 *
 * One answer ends the following: 403 with the error code `node_revoked`. The door is told and
 * never asks again; what it does then (serve out its grace, close, record it) is `door.ts`'s.
 *
 * The connection is the edge's (`src/live/hub_answer.ts`): a mutual-TLS client made from the
 * credential files, or a bearer token read from its file at each poll.
 *
 * @module
 */
import { readNamedFile } from "../config/rooted_read.ts";
import { HubRefusal, readAnswerError, UnverifiedSet } from "../live/hub_answer.ts";
import { sleep } from "../live/backoff.ts";
import { HubLink } from "../live/hub_link.ts";
import type { DoorHubConfig } from "./config.ts";
import { type DoorAnswer, type HeldView, parseAnswer, rebuildView } from "./view.ts";

/** What following needs. */
export interface FollowOptions {
  readonly nodeId: string;
  readonly hub: DoorHubConfig;
  /** The view held at start (from the cache), the first poll's base. */
  readonly initial?: HeldView;
  /** Serves and caches a new view (the follower waits for it). */
  readonly onView: (held: HeldView) => Promise<void>;
  /** The hub answered `node_revoked`: following has stopped. */
  readonly onRevoked: (detail: string) => void;
  readonly log: (line: string) => void;
  /** Jitter source (tests inject one). */
  readonly random?: () => number;
}

/** One door following its hub; its fields are the connection's state (`status()`). */
export class DoorFollower {
  readonly #options: FollowOptions;
  /** The connection's state and client, as an edge's hub client keeps it. */
  readonly #link: HubLink;
  #base: HeldView | undefined;
  #stopped = false;
  /** The last answer's view did not check (readiness: `set_rejected`); cleared by a good one. */
  #unverified: { at: string; message: string } | undefined;
  #current: AbortController | undefined;
  #done: Promise<void> = Promise.resolve();

  /** @param options the hub, node id, first base and what to do with views and a revocation */
  constructor(options: FollowOptions) {
    this.#options = options;
    const random = options.random ?? Math.random;
    this.#link = new HubLink(options.hub, options.log, random, "portcullis: door: ");
    this.#base = options.initial;
  }

  /** Starts the poll loop (it runs until {@link stop} or a revocation). */
  start(): void {
    this.#done = this.#run();
  }

  /** Stops following: the poll or backoff in flight is cut short; resolves when the loop ended. */
  stop(): Promise<void> {
    this.#stopped = true;
    this.#current?.abort();
    return this.#done;
  }

  /** Drops the connection: the next poll makes a new one (after a renewal, with the new pair). */
  reconnect(): void {
    this.#link.close();
  }

  /** The connection's state, for `/v1/status`. */
  status(): Record<string, unknown> {
    const { url, auth, ...connection } = this.#link.status();
    return {
      url,
      auth,
      following: !this.#stopped,
      ...connection,
      unverified: this.#unverified ?? null,
    };
  }

  async #run(): Promise<void> {
    while (!this.#stopped) {
      const current = this.#current = new AbortController();
      try {
        const answer = await this.#ask(current.signal);
        this.#link.answered();
        await this.#apply(answer);
        this.#unverified = undefined;
      } catch (error) {
        if (this.#stopped) break;
        if (error instanceof HubRefusal && error.code === "node_revoked") {
          this.#stopped = true;
          this.#options.onRevoked(error.message);
          break;
        }
        await this.#backOff(error, current.signal);
      }
    }
    this.#link.close();
  }

  /** A received view becomes the base and is served, unless it is the one held. */
  async #apply(answer: DoorAnswer): Promise<void> {
    if (answer.type === "current" && answer.hash === this.#base?.hash) return;
    let held: HeldView;
    try {
      held = rebuildView(answer, this.#base);
    } catch (error) {
      this.#base = undefined;
      const unverified = new UnverifiedSet(error);
      this.#unverified = { at: new Date().toISOString(), message: unverified.message };
      throw unverified;
    }
    const changed = held.hash !== this.#base?.hash;
    this.#base = held;
    if (changed) await this.#options.onView(held);
  }

  /** One poll of the stream, held by the hub, within the poll timeout. */
  async #ask(signal: AbortSignal): Promise<DoorAnswer> {
    const { hub, nodeId } = this.#options;
    const url = new URL("/v1/doors/stream", hub.url);
    url.searchParams.set("node_id", nodeId);
    url.searchParams.set("have", this.#base?.hash ?? "");
    const headers: Record<string, string> = { accept: "application/json" };
    if (hub.tokenFile) {
      const token = await readNamedFile(hub.tokenFile, "hub.token_file", { secret: true });
      headers.authorization = `Bearer ${token.trim()}`;
    }
    const response = await fetch(url, {
      headers,
      client: await this.#link.client(),
      signal: AbortSignal.any([signal, AbortSignal.timeout(hub.pollTimeoutMs)]),
    });
    const text = await response.text();
    if (response.status === 200) return parseAnswer(text);
    throw readAnswerError(response.status, text);
  }

  /** After a failed poll: logs it (once an outage), drops the client, sleeps the backoff. */
  async #backOff(error: unknown, signal: AbortSignal): Promise<void> {
    await sleep(this.#link.failed(error).delay, signal);
  }
}
