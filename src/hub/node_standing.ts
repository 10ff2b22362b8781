/**
 * What each node is, as the hub holds it in memory: its registered type and incarnation
 * (`nodes/`), whether it is revoked (`revoked/`), and the serials of its current incarnation
 * (`issued/<node_id>/`) — read at boot, looked at again with the CRL (revocation.ts: every
 * `revocation.reload_ms` and as soon as `revoked/`, `nodes/` or the CRL changes), and read from
 * disk on every registration and renewal. A config poll, a pool view or a transport check reads
 * no file: issue 31 measured a poll at 174 ms instead of 3.5 ms after one node's 552 renewals,
 * when each poll read every issued record.
 *
 * Every check asks the node's standing as well as the CRL: a certificate is accepted only when its
 * node is registered and not revoked ({@link NodeStanding.judge}: read from memory, the marker
 * first), the serial was issued to the node's current incarnation, and the CRL does not list it. So once the hub has seen a
 * node's marker, no certificate of that node — issued before, during or after the revoke — is
 * accepted on the api, and {@link NodeStanding.admitsTransport} (the relay's and the tunnel's
 * check) says the same; re-provisioning a revoked id starts a new incarnation, which makes every
 * older certificate useless, listed or not.
 *
 * Why issuance and revocation cannot cross (the proof the revoke race test checks): a renewal
 * (hub/enrolment.ts) reads the marker from disk, signs, records the serial, reads the marker from
 * disk again, and answers only if there is still none; `hub revoke` (trust/crl.ts) writes the
 * marker, then collects the node's serials, then writes the CRL. Take a renewal whose second read
 * happens before the marker is written: its record was written before that read, so before the
 * marker, so before the collection — the serial is in the CRL. Take one whose second read happens
 * after: it sees the marker and the certificate is never handed out. And whatever the CRL holds,
 * the hub refuses every certificate of a node whose marker it has seen, which it does within
 * `revocation.reload_ms` at worst. Renewals of one node are also serialized inside the hub
 * ({@link NodeStanding.serialized}), so its limits count each issue.
 *
 * Doors: a node is a door when the CA registered it as one or `doors.nodes` lists it (a list
 * narrows what a node gets, it never widens it); a door never gets the tenant stream, the pool
 * view, the relay or the tunnel. Only a node the CA registered as a door (and listed, when
 * `doors.nodes` is set) may follow the door stream. Without the fleet CA (token nodes, or another
 * CA's certificates) the hub knows no types: `doors.nodes` is the only source.
 *
 * @module
 */
import type { CaFiles } from "../trust/ca.ts";
import {
  type IssuedCertificate,
  pruneRecords,
  recordedFor,
  recordOf,
} from "../trust/issued_index.ts";
import {
  isRevokedBy,
  type NodeEntry,
  readAll,
  readNodeEntry,
  readRevokedMarker,
  type RegisteredType,
  type RevokedMarker,
} from "../trust/node_registry.ts";
import { normaliseSerial } from "../trust/pem.ts";

/** What the standing is made from. */
export interface NodeStandingOptions {
  /** The fleet CA's files; none when nodes are not the CA's (then only `doors.nodes` is known). */
  readonly files?: CaFiles;
  /** `doors.nodes`, when set. */
  readonly doorList?: readonly string[];
  /** The CRL's serials. */
  readonly crl: { isRevoked(serial: string): boolean };
  readonly log: (line: string) => void;
  /** The clock (epoch ms); tests inject one. */
  readonly now?: () => number;
}

/** A certificate's verdict: accepted, of a revoked node or incarnation, or not the CA's. */
export type Judgement = "ok" | "revoked" | "unknown";

/** One node as held. */
interface Held {
  entry?: NodeEntry;
  marker?: RevokedMarker;
  /** The current incarnation's serials (pem.ts spelling) → when each expires (epoch ms). */
  readonly serials: Map<string, number>;
  /** Serials met that are not the current incarnation's, with their verdict (bounded). */
  readonly strangers: Map<string, Judgement>;
  /** When the current incarnation was last issued a certificate (epoch ms). */
  lastIssuedAt: number;
  /** The update that last set it (a look never overwrites a later one). */
  updated: number;
}

/** Records of certificates expired longer than this are removed. */
export const PRUNE_GRACE_MS = 86_400_000;
const MAX_STRANGERS = 64;
/** A marker that cannot be read revokes every incarnation (fail closed). */
const UNREADABLE = Number.MAX_SAFE_INTEGER;

/** The hub's view of every node's standing. */
export class NodeStanding {
  readonly #options: NodeStandingOptions;
  readonly #now: () => number;
  readonly #nodes = new Map<string, Held>();
  readonly #chains = new Map<string, Promise<unknown>>();
  /** Counts updates from disk reads and issues, so a look that began earlier skips their nodes. */
  #updates = 0;
  #problems = new Set<string>();

  /** @param options the CA's files, `doors.nodes`, the CRL, the log */
  constructor(options: NodeStandingOptions) {
    this.#options = options;
    this.#now = options.now ?? Date.now;
  }

  /** The folders whose changes make the hub look at once (none without the CA). */
  get watched(): string[] {
    const files = this.#options.files;
    return files ? [files.revokedDir, files.nodesDir] : [];
  }

  /**
   * Reads every node record and marker, then each registered node's certificates (removing
   * records expired beyond {@link PRUNE_GRACE_MS}): at boot, and again on every look.
   *
   * @throws {Error} naming the folder when it cannot be listed
   */
  async look(): Promise<void> {
    const files = this.#options.files;
    if (!files) return;
    const began = this.#updates;
    const problems: string[] = [];
    const noted = (error: unknown) => problems.push((error as Error).message);
    // A record that does not read keeps what was held; a marker that does not read revokes.
    const entries = await readAll(
      files.nodesDir,
      (dir, id) =>
        readNodeEntry(dir, id).catch((error) => {
          noted(error);
          return this.#nodes.get(id)?.entry;
        }),
    );
    const markers = await readAll(
      files.revokedDir,
      (dir, id) =>
        readRevokedMarker(dir, id).catch((error): RevokedMarker => {
          noted(error);
          return { nodeId: id, incarnation: UNREADABLE, revokedAt: new Date(0).toISOString() };
        }),
    );
    for (const id of new Set([...this.#nodes.keys(), ...entries.keys(), ...markers.keys()])) {
      // A node read or issued to since this look began is newer than what the look read.
      if ((this.#nodes.get(id)?.updated ?? 0) > began) continue;
      await this.#hold(id, entries.get(id), markers.get(id), false).catch(noted);
    }
    for (const problem of problems) {
      if (!this.#problems.has(problem)) this.#options.log(`portcullis: hub: ${problem}`);
    }
    this.#problems = new Set(problems);
  }

  /**
   * The node's record and marker read from disk now (registration and renewal read them so, never
   * from memory), kept as the node's standing.
   *
   * @throws {Error} naming the record that cannot be read
   */
  async readOnDisk(
    nodeId: string,
  ): Promise<{ entry?: NodeEntry; marker?: RevokedMarker; revoked: boolean }> {
    const files = this.#options.files!;
    const entry = await readNodeEntry(files.nodesDir, nodeId);
    const marker = await readRevokedMarker(files.revokedDir, nodeId);
    await this.#hold(nodeId, entry, marker, true);
    return { entry, marker, revoked: isRevokedBy(entry, marker) };
  }

  /**
   * Takes a node's record and marker in, reading its certificates when its incarnation changed;
   * what is held of it after (none when it has neither). `fresh` (a read from disk or an issue,
   * not a look) stamps it before any wait, so a look that began earlier leaves it alone.
   */
  async #hold(
    nodeId: string,
    entry: NodeEntry | undefined,
    marker: RevokedMarker | undefined,
    fresh: boolean,
  ): Promise<Held | undefined> {
    const held = this.#nodes.get(nodeId);
    if (!entry && !marker) {
      this.#nodes.delete(nodeId);
      return undefined;
    }
    const updated = fresh ? ++this.#updates : 0;
    if (held && held.entry?.incarnation === entry?.incarnation) {
      held.entry = entry;
      held.marker = marker;
      held.updated = Math.max(held.updated, updated);
      return held;
    }
    // Held before its certificates are read: a read that fails leaves none accepted but by lookup.
    const next: Held = {
      entry,
      marker,
      serials: new Map(),
      strangers: new Map(),
      lastIssuedAt: 0,
      updated,
    };
    this.#nodes.set(nodeId, next);
    if (entry) await this.#readCertificates(nodeId, entry, next);
    return next;
  }

  async #readCertificates(nodeId: string, entry: NodeEntry, held: Held): Promise<void> {
    const records = await recordedFor(this.#options.files!.issuedDir, nodeId);
    const now = this.#now();
    const expired = records.filter((r) => Date.parse(r.notAfter) + PRUNE_GRACE_MS < now);
    await pruneRecords(this.#options.files!.issuedDir, nodeId, expired.map((r) => r.serial));
    for (const record of records) {
      if (record.incarnation === entry.incarnation && !expired.includes(record)) {
        this.#keep(held, record);
      }
    }
  }

  #keep(held: Held, record: Pick<IssuedCertificate, "serial" | "notAfter" | "issuedAt">): void {
    held.serials.set(normaliseSerial(record.serial), Date.parse(record.notAfter));
    held.lastIssuedAt = Math.max(held.lastIssuedAt, Date.parse(record.issuedAt));
  }

  /**
   * Notes a certificate the hub just issued and recorded for the node's current incarnation, and
   * prunes the node's certificates expired beyond the grace.
   */
  async noteIssue(
    entry: NodeEntry,
    issued: { serial: string; notAfter: Date; issuedAt: Date },
  ): Promise<void> {
    let held = this.#nodes.get(entry.nodeId);
    if (!held || held.entry?.incarnation !== entry.incarnation) {
      held = (await this.#hold(entry.nodeId, entry, held?.marker, true))!;
    }
    held.updated = ++this.#updates;
    const record = {
      serial: issued.serial,
      notAfter: issued.notAfter.toISOString(),
      issuedAt: issued.issuedAt.toISOString(),
    };
    this.#keep(held, record);
    const gone = [...held.serials].filter(([, end]) => end + PRUNE_GRACE_MS < this.#now());
    for (const [serial] of gone) held.serials.delete(serial);
    await pruneRecords(this.#options.files!.issuedDir, entry.nodeId, gone.map(([s]) => s));
  }

  /** When the node's current incarnation was last issued a certificate (epoch ms; 0: never). */
  lastIssuedAt(nodeId: string): number {
    return this.#nodes.get(nodeId)?.lastIssuedAt ?? 0;
  }

  /**
   * Whether a certificate of `nodeId` with `serial` is accepted by the node's standing: its node
   * registered and not revoked, the serial its current incarnation's (without the CA: any). The
   * CRL is the caller's other check (hub/auth.ts reads it before this; {@link admitsTransport}
   * with it). A serial not held is looked up in the node's folder once (another process may have
   * issued it); one of another incarnation is remembered.
   */
  async judge(nodeId: string, serial: string): Promise<Judgement> {
    if (serial === "") return "revoked";
    const files = this.#options.files;
    if (!files) return "ok";
    const held = this.#nodes.get(nodeId);
    if (!held?.entry) return held?.marker ? "revoked" : "unknown";
    if (isRevokedBy(held.entry, held.marker)) return "revoked";
    const key = normaliseSerial(serial);
    if (held.serials.has(key)) return "ok";
    const known = held.strangers.get(key);
    if (known) return known;
    const record = await recordOf(files.issuedDir, nodeId, key).catch(() => undefined);
    if (record && record.incarnation === held.entry.incarnation) {
      this.#keep(held, record);
      return isRevokedBy(held.entry, held.marker) ? "revoked" : "ok";
    }
    const verdict = record ? "revoked" : "unknown";
    if (held.strangers.size >= MAX_STRANGERS) held.strangers.clear();
    held.strangers.set(key, verdict);
    return verdict;
  }

  /** True when the CRL lists `serial`. */
  listed(serial: string): boolean {
    return this.#options.crl.isRevoked(serial);
  }

  /**
   * The relay's and the tunnel's check: an active, unrevoked node that is no door, whose
   * certificate serial belongs to its current incarnation and is not in the CRL.
   */
  async admitsTransport(nodeId: string, serial: string): Promise<boolean> {
    if (this.isDoor(nodeId) || this.#options.crl.isRevoked(serial)) return false;
    return (await this.judge(nodeId, serial)) === "ok";
  }

  /** The type the CA registered the node as (undefined: not registered, or no CA). */
  nodeTypeOf(nodeId: string): RegisteredType | undefined {
    return this.#nodes.get(nodeId)?.entry?.nodeType;
  }

  /** True when the node is a door: registered as one, or listed in `doors.nodes`. */
  isDoor(nodeId: string): boolean {
    return this.nodeTypeOf(nodeId) === "door" ||
      (this.#options.doorList?.includes(nodeId) ?? false);
  }

  /**
   * True when the node may follow the door stream: registered by the CA as a door (and listed,
   * when `doors.nodes` is set); without the CA, listed in `doors.nodes`.
   */
  mayFollowDoors(nodeId: string): boolean {
    const list = this.#options.doorList;
    if (!this.#options.files) return list?.includes(nodeId) ?? false;
    return this.nodeTypeOf(nodeId) === "door" && (list?.includes(nodeId) ?? true);
  }

  /**
   * Runs `task` after every earlier task of the same node has settled: one registration or
   * renewal of a node at a time, so each sees the issues before it.
   */
  serialized<T>(nodeId: string, task: () => Promise<T>): Promise<T> {
    const before = this.#chains.get(nodeId) ?? Promise.resolve();
    const run = before.then(task);
    const tail = run.then(() => {}, () => {});
    this.#chains.set(nodeId, tail);
    tail.then(() => {
      if (this.#chains.get(nodeId) === tail) this.#chains.delete(nodeId);
    });
    return run;
  }

  /** Counts for `/v1/config`. */
  status(): Record<string, unknown> {
    let revoked = 0;
    for (const held of this.#nodes.values()) if (isRevokedBy(held.entry, held.marker)) revoked++;
    return { registered: [...this.#nodes.values()].filter((h) => h.entry).length, revoked };
  }
}
