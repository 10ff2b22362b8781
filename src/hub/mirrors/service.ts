/**
 * Serving doors from a hub: the mirror registry, the prober (when enabled) and the door feed, tied
 * together. Every registry reload and every probe result or round recomputes the view — enabled
 * mirrors with their verdicts, and the slugs — and the feed wakes held polls only when the view's
 * hash changed, so a round that changes nothing costs the doors nothing.
 *
 * The hub's routes authenticate a node and check it may follow as a door (hub/node_standing.ts:
 * registered by the CA as a door, and listed in `doors.nodes` when that is set) before calling
 * {@link DoorService.answer}; this module never sees a credential. A new mirror is `unknown` until the next round checks it.
 *
 * With the prober enabled, the results are remembered across restarts (`remembered.ts`): read
 * before the first view is published, so the first answer a door gets after a restart carries
 * the verdicts the hub had, and written again after every result and round.
 *
 * @module
 */
import type { ServerResponse } from "node:http";
import { jsonReply, type Reply } from "../../request/reply.ts";
import { CheckHostClient } from "./check_host.ts";
import type { DoorsConfig } from "./config.ts";
import { DoorFeed } from "./feed.ts";
import { type MirrorCheckClient, MirrorProber } from "./prober.ts";
import { MirrorRegistry, type RegistrySet, type ReloadOutcome } from "./registry.ts";
import { RememberedResults } from "./remembered.ts";
import { type Verdict, verdictOf, VERDICTS } from "./verdict.ts";
import type { DoorView } from "./view.ts";

/** The path of the door stream on the hub's api listener. */
export const DOOR_STREAM_PATH = "/v1/doors/stream";

/** What the service needs besides its config. */
export interface DoorServiceOptions {
  readonly log: (line: string) => void;
  /** The prober's client (default: check-host.net's); used only with `prober.enabled`. */
  readonly client?: MirrorCheckClient;
  /** How long a poll of a current door is held (the hub's `stream.hold_ms`). */
  readonly holdMs: number;
  /** The clock (epoch ms); tests inject one. */
  readonly now?: () => number;
  /** The hub's node id: written in the remembered results and required of them. */
  readonly hubId?: string;
}

/** What the hub knows about one door that follows it. */
export interface DoorRecord {
  readonly node_id: string;
  last_seen: string;
  have: string;
  holding: boolean;
  polls: number;
}

/**
 * The door stream of one hub, from start to stop.
 *
 * @internal
 */
export class DoorService {
  /** The doors seen, by node id. */
  readonly doors: Map<string, DoorRecord> = new Map();
  readonly #config: DoorsConfig;
  readonly #options: DoorServiceOptions;
  readonly #now: () => number;
  readonly #registry: MirrorRegistry;
  readonly #stopping = new AbortController();
  #prober: MirrorProber | undefined;
  #remembered: RememberedResults | undefined;
  /** The last save {@link #refresh} started ({@link probeNow} waits for it). */
  #saved: Promise<void> = Promise.resolve();
  #feed: DoorFeed | undefined;

  /**
   * @param config the resolved `doors:` fragment
   * @param options the log, the prober's client, the hold and the clock
   */
  constructor(config: DoorsConfig, options: DoorServiceOptions) {
    this.#config = config;
    this.#options = options;
    this.#now = options.now ?? Date.now;
    this.#registry = new MirrorRegistry(config, { log: options.log });
  }

  /**
   * Loads the registry, publishes the first view, then starts watching and probing.
   *
   * @throws {ConfigError} when the mirrors folder or the slugs file is invalid
   */
  async start(): Promise<void> {
    const set = await this.#registry.load();
    const { prober, stateDir } = this.#config;
    if (prober.enabled) {
      this.#prober = new MirrorProber({
        client: this.#options.client ?? new CheckHostClient(),
        regions: prober.regions,
        intervalMs: prober.intervalMs,
        timeoutMs: prober.timeoutMs,
        hosts: () => this.#registry.current.mirrors.filter((m) => m.enabled).map((m) => m.host),
        onResult: () => this.#refresh(),
        onRound: () => this.#refresh(),
        log: this.#options.log,
        now: this.#now,
      });
      if (stateDir !== undefined) await this.#recall(stateDir, set);
    }
    this.#feed = new DoorFeed(this.#view(set), { history: this.#config.history });
    this.#registry.onChange(() => this.#refresh());
    this.#prober?.start();
  }

  /** Loads the remembered results into the prober (before the first view: remembered.ts). */
  async #recall(dir: string, set: RegistrySet): Promise<void> {
    const { log, hubId } = this.#options;
    const remembered = new RememberedResults({ dir, hub: hubId ?? "", log, now: this.#now });
    this.#remembered = remembered;
    const results = await remembered.load({
      now: this.#now(),
      intervalMs: this.#config.prober.intervalMs,
      regions: this.#config.prober.regions,
      hosts: new Set(set.mirrors.map((m) => m.host)),
    });
    for (const [host, result] of results) this.#prober!.results.set(host, result);
  }

  /** Stops watching and probing, and releases every held poll (idempotent). */
  stop(): void {
    this.#stopping.abort();
    this.#registry.stop();
    this.#prober?.stop();
    this.#feed?.close();
  }

  /** The feed (after {@link start}). */
  get feed(): DoorFeed {
    if (!this.#feed) throw new RangeError("The door service is not started");
    return this.#feed;
  }

  /** Reads the registry now. */
  reload(): Promise<ReloadOutcome> {
    return this.#registry.reload();
  }

  /** Runs a probe round now and resolves when it has ended (at once without a prober). */
  async probeNow(): Promise<void> {
    await this.#prober?.roundNow();
    await this.#saved;
  }

  /** The doors' state for the hub's `/v1/config`: registry, prober, mirrors and verdicts, doors. */
  status(): Record<string, unknown> {
    const set = this.#registry.current;
    const mirrors = set.mirrors.map((m) => {
      const result = this.#prober?.results.get(m.host);
      return {
        host: m.host,
        region: m.region ?? null,
        enabled: m.enabled,
        verdict: this.#verdict(m.host),
        checked_at: result ? new Date(result.at).toISOString() : null,
        regions: result ? Object.fromEntries(result.regions) : {},
      };
    });
    const verdicts = Object.fromEntries(VERDICTS.map((v) => [v, 0])) as Record<Verdict, number>;
    for (const m of mirrors) if (m.enabled) verdicts[m.verdict]++;
    const { prober } = this.#config;
    return {
      hash: this.#feed?.live.hash ?? null,
      registry: this.#registry.status(),
      prober: {
        enabled: prober.enabled,
        interval_ms: prober.intervalMs,
        regions: prober.regions,
        ...this.#prober?.status(),
        remembered: this.#remembered?.status() ?? null,
      },
      mirrors,
      verdicts,
      held_polls: this.#feed?.waiting ?? 0,
      doors: [...this.doors.values()],
    };
  }

  /**
   * Answers one poll of an authenticated door: `GET /v1/doors/stream?node_id=&have=[&wait=0]`,
   * held unless `wait=0`.
   *
   * @param signal ends the hold early (the hub's own reasons, such as a revocation); the answer is
   *   then the current one and the caller decides what to send
   * @returns the reply, or undefined when the client went away while held
   */
  async answer(
    url: URL,
    response: ServerResponse,
    signal?: AbortSignal,
  ): Promise<Reply | undefined> {
    const nodeId = url.searchParams.get("node_id") ?? "";
    const have = url.searchParams.get("have") ?? "";
    const hold = url.searchParams.get("wait") === "0" ? 0 : this.#options.holdMs;
    const record = this.doors.get(nodeId) ??
      { node_id: nodeId, last_seen: "", have: "", holding: false, polls: 0 };
    this.doors.set(nodeId, record);
    Object.assign(record, { last_seen: new Date(this.#now()).toISOString(), have, holding: true });
    record.polls++;
    const gone = new AbortController();
    const onClose = () => gone.abort();
    response.once("close", onClose);
    const signals = [gone.signal, this.#stopping.signal, ...(signal ? [signal] : [])];
    const answer = await this.feed.answer(have, hold, AbortSignal.any(signals));
    response.off("close", onClose);
    record.holding = false;
    return gone.signal.aborted ? undefined : jsonReply(answer);
  }

  /** Publishes the view of the live registry and results; drops results of removed mirrors. */
  #refresh(): void {
    const set = this.#registry.current;
    this.#prober?.forget(new Set(set.mirrors.map((m) => m.host)));
    this.#feed?.publish(this.#view(set));
    if (this.#prober && this.#remembered) this.#saved = this.#remembered.save(this.#prober.results);
  }

  /** The view doors get: enabled mirrors with verdicts, and every slug. */
  #view(set: RegistrySet): DoorView {
    return {
      mirrors: set.mirrors.filter((m) => m.enabled).map((m) => {
        const result = this.#prober?.results.get(m.host);
        return {
          host: m.host,
          region: m.region ?? null,
          verdict: this.#verdict(m.host),
          checked_at: result ? new Date(result.at).toISOString() : null,
        };
      }),
      slugs: set.slugs.map((s) => ({
        slug: s.slug,
        strategy: s.strategy,
        mirrors: s.mirrors ?? null,
        exclude_regions: s.excludeRegions,
      })),
    };
  }

  #verdict(host: string): Verdict {
    const now = this.#now();
    return verdictOf(this.#prober?.results.get(host), {
      now,
      intervalMs: this.#config.prober.intervalMs,
    });
  }
}

/**
 * The door stream's route, as a named function the hub's routes call for an authenticated door.
 *
 * @param service the hub's door service
 */
export function doorStreamRoute(
  service: DoorService,
): (url: URL, response: ServerResponse, signal?: AbortSignal) => Promise<Reply | undefined> {
  return function answerDoorStream(url, response, signal) {
    return service.answer(url, response, signal);
  };
}
