/**
 * What the hub has revoked: the fleet CA's CRL (the serials of certificates `portcullis hub revoke`
 * withdrew), read at boot, then again every `revocation.reload_ms` (60 s by default) and as soon as
 * the CA folder changes. Token nodes are revoked by removing their token file; the token book
 * (auth.ts) notices that itself. On every look — a CRL changed or not — the listeners are told, so
 * the routes can end the held polls of nodes revoked since they were admitted: a revoked node sees
 * its stream closed with `node_revoked` within one look, not at its next poll.
 *
 * A CRL that cannot be read or whose signature is not the intermediate's is refused: at boot the
 * hub serves with its last good copy of the list, and refuses to start only without one
 * (enforced_crl.ts says why); later it keeps the list it holds and says why in the log, once per
 * distinct reason.
 *
 * With the fleet CA each look also reads the nodes' standing (node_standing.ts: `revoked/`, the
 * marker `hub revoke` writes first, and `nodes/`), and those folders are watched like the CRL, so
 * the listeners — held polls, and the relay and tunnel through {@link Revocations.admitsTransport}
 * — hear of a revoked node at the same look, within `reload_ms` at worst.
 *
 * @module
 */
import { BootError } from "../boot/boot_error.ts";
import { certificateSerial } from "../trust/ca.ts";
import { describeIoError } from "../config/yaml_file.ts";
import type { Family } from "../observe/exposition.ts";
import { type CrlSource, EnforcedCrl } from "./enforced_crl.ts";
import type { Judgement, NodeStanding } from "./node_standing.ts";

export type { CrlSource } from "./enforced_crl.ts";

/**
 * The canonical form of a certificate serial for comparison: lower-case hex without leading zeros
 * (TLS stacks and X.509 libraries disagree on case and on the sign byte).
 */
export function serialKey(serial: string): string {
  return serial.toLowerCase().replace(/^(00)+/, "").replace(/^0+(?=.)/, "");
}

/** The serial of a peer certificate given as DER, in {@link serialKey} form ("" when unreadable). */
export function peerSerial(der: Uint8Array | undefined): string {
  if (!der || der.byteLength === 0) return "";
  try {
    return serialKey(certificateSerial(Uint8Array.from(der)));
  } catch {
    return "";
  }
}

/** The revocations the hub enforces, looked for again on a timer and on change. */
export class Revocations {
  readonly #crl: CrlSource | undefined;
  readonly #enforced: EnforcedCrl | undefined;
  readonly #reloadMs: number;
  readonly #log: (line: string) => void;
  readonly #standing: NodeStanding | undefined;
  readonly #listeners = new Set<() => void>();
  /** The enforced list's serials, in {@link serialKey} form. */
  #serials: ReadonlySet<string> = new Set();
  #loadedAt: string | undefined;
  #lastError: string | undefined;
  #timer: number | undefined;
  readonly #watchers = new Set<Deno.FsWatcher>();
  #looking: Promise<void> | undefined;
  /** The look that follows the running one, for asks made while it runs. */
  #next: Promise<void> | undefined;
  #stopped = false;
  #looks = 0;

  /**
   * @param options the CRL (none: token nodes only), the nodes' standing, how often to look, where
   *   failures are logged
   */
  constructor(
    options: {
      crl?: CrlSource;
      standing?: NodeStanding;
      reloadMs: number;
      log: (line: string) => void;
    },
  ) {
    this.#crl = options.crl;
    this.#enforced = options.crl && new EnforcedCrl(options.crl, options.log);
    this.#standing = options.standing;
    this.#reloadMs = options.reloadMs;
    this.#log = options.log;
  }

  /**
   * Reads the CRL for the first time (its last good copy when it cannot be used).
   *
   * @throws {BootError} when neither the CRL nor its last good copy reads and verifies
   */
  async load(): Promise<void> {
    if (!this.#enforced) return;
    try {
      await this.#enforced.load();
      this.#serials = new Set([...this.#enforced.serials].map(serialKey));
      this.#loadedAt = new Date().toISOString();
    } catch (error) {
      throw new BootError([`Cannot read the fleet CA's CRL: ${describeIoError(error)}`]);
    }
    try {
      await this.#standing?.look();
    } catch (error) {
      throw new BootError([`Cannot read the fleet CA's nodes: ${describeIoError(error)}`]);
    }
  }

  /**
   * Starts looking on a timer and when the CRL changes. The file itself is watched, not its folder:
   * the hub may read the CRL but not the folder, which can still hold the root key. A CRL is
   * replaced by a rename, which ends a watch on the file, so the watch is made again after every
   * event (a change between the two is caught by the look the event starts).
   */
  start(): void {
    this.#timer = setInterval(() => this.look(), this.#reloadMs) as unknown as number;
    if (this.#crl) this.#watch(this.#crl.file);
    for (const folder of this.#standing?.watched ?? []) this.#watch(folder);
  }

  #watch(file: string): void {
    if (this.#stopped) return;
    let watcher: Deno.FsWatcher;
    try {
      watcher = Deno.watchFs(file, { recursive: false });
      this.#watchers.add(watcher);
    } catch {
      return; // the timer still looks
    }
    (async () => {
      for await (const _event of watcher) break;
    })().catch(() => {}).finally(() => {
      this.#watchers.delete(watcher);
      watcher.close();
      if (this.#stopped) return;
      this.look();
      this.#watch(file);
    });
  }

  /** Stops looking. */
  stop(): void {
    this.#stopped = true;
    clearInterval(this.#timer);
    for (const watcher of this.#watchers) {
      try {
        watcher.close();
      } catch { /* closed after its event */ }
    }
  }

  /** True when the CRL lists this serial (any case, with or without leading zeros). */
  isRevoked(serial: string): boolean {
    return serial !== "" && this.#serials.has(serialKey(serial));
  }

  /**
   * Whether a certificate of `nodeId` with `serial` is accepted by its node's standing
   * (node_standing.ts: registered, not revoked, of its current incarnation); without the fleet
   * CA, by the CRL alone. The caller reads the CRL too (auth.ts).
   */
  judge(nodeId: string, serial: string): Promise<Judgement> {
    if (this.#standing) return this.#standing.judge(nodeId, serial);
    return Promise.resolve(this.isRevoked(serial) ? "revoked" : "ok");
  }

  /**
   * The relay's and the tunnel's check for a node's certificate: an active, unrevoked node that is
   * no door, its serial of its current incarnation and not in the CRL (node_standing.ts).
   */
  admitsTransport(nodeId: string, serial: string): Promise<boolean> {
    if (this.#standing) return this.#standing.admitsTransport(nodeId, serial);
    return Promise.resolve(serial !== "" && !this.isRevoked(serial));
  }

  /** Calls `listener` after every look (changed or not). */
  onLook(listener: () => void): void {
    this.#listeners.add(listener);
  }

  /**
   * Looks now: reads the CRL again (keeping the last good one on failure), then tells the
   * listeners. A look asked for while one runs may follow a change that one read too early: one
   * more look starts when it ends, shared by every such ask (before, they shared the running look
   * and a change made during it waited for the timer).
   */
  look(): Promise<void> {
    if (this.#looking) {
      const running = this.#looking;
      this.#next ??= running.then(() => {
        this.#next = undefined;
        return this.#stopped ? undefined : this.look();
      });
      return this.#next;
    }
    const looking = this.#lookOnce();
    this.#looking = looking;
    looking.finally(() => {
      if (this.#looking === looking) this.#looking = undefined;
    });
    return looking;
  }

  async #lookOnce(): Promise<void> {
    const failed = (what: string) => (error: unknown) =>
      `Cannot read the fleet CA's ${what} (keeping the last good one): ${describeIoError(error)}`;
    const crl = this.#enforced
      ? await this.#read().then(() => undefined, failed("CRL"))
      : undefined;
    const nodes = await this.#standing?.look().then(() => undefined, failed("nodes"));
    const message = crl ?? nodes;
    if (message !== undefined && message !== this.#lastError) {
      this.#log(`portcullis: hub: ${message}`);
    }
    this.#lastError = message;
    this.#looks++;
    for (const listener of this.#listeners) listener();
  }

  /** What `/v1/config` says about revocation. */
  status(): Record<string, unknown> {
    return {
      crl: this.#crl ? this.#crl.file : null,
      crl_state: this.#enforced?.status() ?? null,
      revoked_certificates: this.#serials.size,
      loaded_at: this.#loadedAt ?? null,
      last_error: this.#lastError ?? null,
      reload_ms: this.#reloadMs,
      looks: this.#looks,
      nodes: this.#standing?.status() ?? null,
    };
  }

  /** The hub's `/metrics` families of revocation (none without the fleet CA). */
  families(): Family[] {
    return this.#enforced?.families() ?? [];
  }

  async #read(): Promise<void> {
    await this.#enforced!.read();
    const serials = new Set([...this.#enforced!.serials].map(serialKey));
    const added = [...serials].filter((serial) => !this.#serials.has(serial));
    if (this.#loadedAt !== undefined && added.length > 0) {
      this.#log(
        `portcullis: hub: CRL ${this.#crl!.file} revokes ${added.length} more certificates`,
      );
    }
    this.#serials = serials;
    this.#loadedAt = new Date().toISOString();
    await this.#enforced!.keep();
  }
}
