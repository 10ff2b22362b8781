/**
 * The door role: a cut-down, disposable edge. It answers a cover page on `/`, matches a secret
 * slug on other paths, and sends a hit to a healthy public mirror with a 302 — no upstream dial,
 * no tenant certificates, no backend list in its config or cache, so its compromise reveals the
 * slugs and public mirror hostnames and nothing else. It learns the slugs and mirrors from its hub
 * over a long-poll stream (`follow.ts`) and keeps the last good view on disk.
 *
 * {@link startDoor} reads top to bottom as the boot's steps: a revoked door refuses (unless a
 * registration secret provisions it again); registration; the cover and TLS files; the cached view,
 * served at once when its hash checks; the listeners; then following the hub. When the hub says
 * `node_revoked` the door keeps serving for `grace_seconds`, then closes its public listeners,
 * deletes its cached view, writes `revoked.json` and stops; its health listener says why until the
 * process ends.
 *
 * @module
 */
import { formatAddress, type ListenerAddress } from "../config/load.ts";
import { diagnosticSink } from "../observe/diag.ts";
import { describeError } from "../request/errors.ts";
import { checkRevocation, type Enrol, readCover, readOwnTls, register } from "./boot.ts";
import {
  deleteCachedView,
  readCachedView,
  removeRevocation,
  writeCachedView,
  writeRevocation,
} from "./cache.ts";
import type { DoorConfig } from "./config.ts";
import { DoorFollower } from "./follow.ts";
import { DoorListeners, type DoorListenerSpec, type DoorRole } from "./listeners.ts";
import { healthHandler, type PublicCounts, publicHandler } from "./serve.ts";
import { DoorTable } from "./table.ts";
import { CertificateRenewal, ensureNodeCertificate } from "../live/enrol.ts";
import type { HeldView } from "./view.ts";
import { type NotReadyReason, setReasons } from "../live/readiness.ts";

/** A running door. */
export interface Door {
  readonly listeners: readonly { readonly role: DoorRole; readonly address: string }[];
  /** The door's state for `/v1/status`. */
  status(): Record<string, unknown>;
  /** Why the door is not ready (none: ready), for `/readyz` (src/live/readiness.ts). */
  reasons(): NotReadyReason[];
  /** Resolves when the door stopped: closed, or revoked and closed to the public. */
  readonly finished: Promise<"closed" | "revoked">;
  /** Stops following and closes every listener (a revocation under way is completed first). */
  close(): Promise<void>;
}

/** What a boot may be given besides the config. */
export interface DoorOptions {
  readonly log?: (line: string) => void;
  /** The `random` strategy's random source (the backoff's jitter uses its own). */
  readonly random?: () => number;
  /** Registration (default: `ensureNodeCertificate` from src/live/enrol.ts). */
  readonly enrol?: Enrol;
}

/**
 * Boots a door (see the module doc for the steps).
 *
 * @throws {BootError} when the door was revoked, registration fails, a file cannot be read or a
 *   listener cannot bind
 */
export async function startDoor(config: DoorConfig, options: DoorOptions = {}): Promise<Door> {
  const log = options.log ?? diagnosticSink();
  const reprovisioning = await checkRevocation(config, log);
  await register(config, options.enrol ?? ensureNodeCertificate, log);
  if (reprovisioning) await removeRevocation(config.cacheDir);
  const cover = await readCover(config.coverFile);
  const ownTls = await readOwnTls(config);
  const table = new DoorTable({ random: options.random });
  const cached = await readCachedView(config.cacheDir);
  if (cached.state === "verified") {
    table.swap(cached.held, "cache");
    log(`portcullis: door: serving the cached view ${cached.held.hash.slice(0, 12)}`);
  } else if (cached.state === "refused") {
    log(`portcullis: door: cached view refused: ${cached.reason}; waiting for the hub`);
  }
  const door = new RunningDoor(config, table, log);
  const specs: DoorListenerSpec[] = [
    ...config.listen.map((l, i): DoorListenerSpec => ({
      role: "public",
      address: l.address,
      handler: publicHandler({ table, cover, counts: door.counts }),
      tls: ownTls[i],
    })),
    ...config.health.map((address): DoorListenerSpec => ({
      role: "health",
      address,
      handler: healthHandler(() => door.status(), () => door.reasons()),
    })),
  ];
  const listeners = new DoorListeners(specs, config);
  const actual = await listeners.bind();
  for (const { role, address } of actual) {
    log(`portcullis: door ${role} listening on ${formatAddress(address)}`);
  }
  door.begin(listeners, actual);
  return door;
}

/** The lifecycle of a booted door: following → (revoking → revoked) → closed. */
class RunningDoor implements Door {
  readonly counts: PublicCounts = { covers: 0, hits: 0, refused: 0 };
  readonly finished: Promise<"closed" | "revoked">;
  listeners: { role: DoorRole; address: string }[] = [];
  readonly #config: DoorConfig;
  readonly #table: DoorTable;
  readonly #log: (line: string) => void;
  #bound: DoorListeners | undefined;
  #follower: DoorFollower | undefined;
  #renewal: CertificateRenewal | undefined;
  #state: "following" | "revoking" | "revoked" | "closed" = "following";
  #revocation: { at: string; reason: string } | undefined;
  #graceTimer: ReturnType<typeof setTimeout> | undefined;
  #revoking: Promise<void> | undefined;
  #closing: Promise<void> | undefined;
  #finish!: (how: "closed" | "revoked") => void;

  constructor(config: DoorConfig, table: DoorTable, log: (line: string) => void) {
    this.#config = config;
    this.#table = table;
    this.#log = log;
    this.finished = new Promise((resolve) => this.#finish = resolve);
  }

  /** Starts following the hub, from the view held. */
  begin(
    bound: DoorListeners,
    actual: readonly { role: DoorRole; address: ListenerAddress }[],
  ): void {
    this.#bound = bound;
    this.listeners = actual.map(({ role, address }) => ({ role, address: formatAddress(address) }));
    this.#follower = new DoorFollower({
      nodeId: this.#config.nodeId,
      hub: this.#config.hub,
      initial: this.#table.held,
      onView: (held) => this.#received(held),
      onRevoked: (detail) => this.#revoked(detail),
      log: this.#log,
    });
    this.#follower.start();
    const hub = this.#config.hub;
    if (hub.tls) {
      const follower = this.#follower;
      this.#renewal = new CertificateRenewal({ nodeId: this.#config.nodeId, hub, log: this.#log });
      this.#renewal.start(() => follower.reconnect());
    }
  }

  status(): Record<string, unknown> {
    const reasons = this.reasons();
    return {
      node_id: this.#config.nodeId,
      role: "door",
      state: this.#state,
      ready: reasons.length === 0,
      reasons,
      revocation: this.#revocation ?? null,
      stream: this.#follower?.status() ?? null,
      renewal: this.#renewal?.status() ?? null,
      view: this.#table.status(),
      answered: { ...this.counts },
    };
  }

  /**
   * Ready while a verified view is held — from the hub, or the cache checked at boot — and the
   * door serves the public; a view that later fails to refresh keeps it ready (the last good view
   * is what it serves). Without one, the follower's view of why; once revoked and closed, that.
   */
  reasons(): NotReadyReason[] {
    if (this.#state === "revoked" || this.#state === "closed") {
      const revoked = this.#state === "revoked";
      return [{
        code: revoked ? "revoked" : "draining",
        message: revoked
          ? "The hub revoked this door: its public listeners are closed"
          : "The door has stopped",
        ...(revoked && this.#revocation ? { since: this.#revocation.at } : {}),
      }];
    }
    const held = this.#table.held;
    return setReasons({
      generation: held ? 1 : 0,
      tenants: held?.view.slugs.length ?? 0,
      emptyTenants: "ready",
      follower: this.#follower?.status() ?? {},
      noun: "view",
    });
  }

  close(): Promise<void> {
    this.#closing ??= (async () => {
      if (this.#state === "revoking") await this.#completeRevocation();
      this.#renewal?.stop();
      await this.#follower?.stop();
      await this.#bound?.close();
      const how = this.#state === "revoked" ? "revoked" : "closed";
      this.#state = "closed";
      this.#finish(how);
    })();
    return this.#closing;
  }

  /** A new view from the hub: served at once, then cached (a failed write is logged). */
  async #received(held: HeldView): Promise<void> {
    if (this.#state !== "following") return;
    this.#table.swap(held, "hub");
    try {
      await writeCachedView(this.#config.cacheDir, held);
    } catch (error) {
      this.#log(`portcullis: door: cannot cache the view: ${describeError(error)}`);
    }
  }

  /** The hub said `node_revoked`: serve out the grace, then close to the public. */
  #revoked(detail: string): void {
    this.#renewal?.stop();
    if (this.#state !== "following") return;
    this.#state = "revoking";
    this.#revocation = { at: new Date().toISOString(), reason: detail };
    const seconds = this.#config.hub.graceMs / 1000;
    this.#log(
      `portcullis: door: the hub revoked this node (${detail}); serving ${seconds} s more, ` +
        "then closing the public listeners",
    );
    this.#graceTimer = setTimeout(() => void this.#completeRevocation(), this.#config.hub.graceMs);
  }

  /** Closes the public listeners, deletes the cached view, records the revocation. */
  #completeRevocation(): Promise<void> {
    this.#revoking ??= (async () => {
      clearTimeout(this.#graceTimer);
      const { cacheDir } = this.#config;
      await this.#bound?.close("public");
      this.#table.clear();
      try {
        await deleteCachedView(cacheDir);
        await writeRevocation(cacheDir, this.#revocation!);
      } catch (error) {
        this.#log(`portcullis: door: cannot record the revocation: ${describeError(error)}`);
      }
      this.#state = "revoked";
      this.listeners = this.listeners.filter((l) => l.role !== "public");
      this.#log(
        `portcullis: door: public listeners closed, cached view deleted, revocation recorded in ` +
          `${cacheDir}; provision this door again to serve`,
      );
      this.#finish("revoked");
    })();
    return this.#revoking;
  }
}
