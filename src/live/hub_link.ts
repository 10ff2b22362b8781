/**
 * A follower's connection to its hub, as `/v1/config` shows it: whether the hub answered and when,
 * the failures in a row and the backoff after them, the last error, what the hub last said about
 * itself, and the mutual-TLS client (made again after each failure, so renewed credentials are
 * read). Apart from the follower's loop (hub_client.ts) because it is state about the hub alone:
 * a disk that refuses a write counts as a failure for the backoff but never marks the hub away
 * (issue 32: a full cache folder was logged as the hub's error).
 *
 * @module
 */
import type { HubClientConfig } from "../config/load.ts";
import { backoffDelay, type BackoffSettings } from "./backoff.ts";
import { CacheWriteError } from "./cache_faults.ts";
import { type Answer, describeHubFailure, hubHttpClient, UnverifiedSet } from "./hub_answer.ts";

/** What a link needs of a follower's hub settings (an edge's `hub`, a door's). */
export interface LinkedHub extends BackoffSettings {
  readonly url: string;
  readonly tls?: HubClientConfig["tls"];
}

/** One follower's connection state (an edge's hub client, a door's follower). */
export class HubLink {
  readonly #hub: LinkedHub;
  readonly #log: (line: string) => void;
  readonly #who: string;
  readonly #random: () => number;
  #connected = false;
  #failures = 0;
  #lastError: { at: string; message: string } | undefined;
  #lastContact: string | undefined;
  #retryAt: number | undefined;
  /** When the hub stopped answering (the first failure of this outage); readiness names it. */
  #unreachableSince: string | undefined;
  #hubNote: Record<string, unknown> | undefined;
  #hubGeneration: number | undefined;
  #client: Deno.HttpClient | undefined;

  /**
   * @param hub the hub's address, credentials and backoff
   * @param log where connections and failures are said
   * @param random the jitter source
   * @param who what its lines start with (`portcullis: `, a door's `portcullis: door: `)
   */
  constructor(
    hub: LinkedHub,
    log: (line: string) => void,
    random: () => number,
    who = "portcullis: ",
  ) {
    this.#hub = hub;
    this.#log = log;
    this.#random = random;
    this.#who = who;
  }

  /** Failures in a row since the hub last answered. */
  get failures(): number {
    return this.#failures;
  }

  /** The hub answered: logs a reconnection, clears the failure count and the retry time. */
  answered(answer?: Answer): void {
    if (!this.#connected) this.#log(`${this.#who}hub ${this.#hub.url} connected`);
    this.#connected = true;
    this.#failures = 0;
    this.#retryAt = undefined;
    this.#unreachableSince = undefined;
    this.#lastContact = new Date().toISOString();
    if (answer) [this.#hubNote, this.#hubGeneration] = [answer.hub, answer.generation];
  }

  /**
   * A poll (or a write after it) failed: logs it — once an outage for the hub, every time for the
   * disk — drops the HTTP client, and says how long to wait.
   *
   * @returns the message, and the backoff delay in milliseconds
   */
  failed(error: unknown): { message: string; delay: number } {
    const message = describeHubFailure(error);
    const disk = error instanceof CacheWriteError;
    if (disk) this.#log(`${this.#who}${message}; retrying`);
    else if (this.#connected || this.#failures === 0) {
      this.#log(`${this.#who}hub ${this.#hub.url}: ${message}; retrying`);
    }
    if (!disk) this.#connected = false;
    this.#lastError = { at: new Date().toISOString(), message };
    // The hub answered with a set that did not check: it is reachable, the set is what failed.
    if (!disk && !(error instanceof UnverifiedSet)) this.#unreachableSince ??= this.#lastError.at;
    this.#failures++;
    this.close();
    const delay = backoffDelay(this.#hub, this.#failures, this.#random);
    this.#retryAt = Date.now() + delay;
    return { message, delay };
  }

  /** The hub refused this node for good (revoked). */
  lost(): void {
    this.#connected = false;
  }

  /** The mutual-TLS client, made from the credential files on first use after each failure. */
  async client(): Promise<Deno.HttpClient | undefined> {
    const { tls } = this.#hub;
    if (tls && !this.#client) this.#client = await hubHttpClient(tls);
    return this.#client;
  }

  /** Closes the HTTP client; the next poll makes a new one. */
  close(): void {
    this.#client?.close();
    this.#client = undefined;
  }

  /** The connection's fields of `/v1/config`'s `hub`. */
  status(): Record<string, unknown> {
    const hub = this.#hub;
    return {
      url: hub.url,
      auth: hub.tls ? "mutual TLS" : "token",
      connected: this.#connected,
      last_contact: this.#lastContact ?? null,
      last_error: this.#lastError ?? null,
      failures: this.#failures,
      retry_at: this.#retryAt === undefined ? null : new Date(this.#retryAt).toISOString(),
      unreachable_since: this.#unreachableSince ?? null,
    };
  }

  /** What the hub last said about itself, for `/v1/config`'s `hub`. */
  hubStatus(): Record<string, unknown> {
    return { hub_generation: this.#hubGeneration ?? null, hub: this.#hubNote ?? null };
  }
}
