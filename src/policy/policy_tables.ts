/**
 * The shared memory behind the per-client policies of one edge: a {@link ClientTable} per tenant
 * and policy (`rate:<host>` for the rate limit, `pre:<host>` for its pre-check before a fleet
 * store, `ttl:<host>` for the TTL blocklist; `*` is the globals'), and the salt their keys are
 * hashed with. Worker 0 allocates; every other request
 * worker adopts the same buffers before it builds a generation (the `start` and `prepare`
 * messages carry {@link SharedTables}), so `workers: N` enforces one limit per client, not N.
 *
 * A tenant keeps its table across reloads while its host and the table's size stay the same —
 * its clients keep their buckets and blocks when a rate changes. A table no generation uses is
 * dropped at the next build. Keys are FNV-1a over the salt and the client address: the salt is
 * random per edge, so nobody outside can aim many addresses at one probe window.
 *
 * @module
 */
import { ClientTable, keyOf } from "./client_table.ts";

/**
 * The tables and the salt as plain data, for another worker.
 *
 * @internal
 */
export interface SharedTables {
  readonly salt: string;
  readonly tables: readonly (readonly [string, SharedArrayBuffer])[];
}

/** One table as a compiled policy holds it. */
export interface NamedTable {
  readonly name: string;
  readonly table: ClientTable;
}

/** Every per-client table of one edge, by name. */
export class PolicyTables {
  readonly #buffers = new Map<string, SharedArrayBuffer>();
  #salt: string;

  /** @param shared the tables of worker 0, when this is another worker */
  constructor(shared?: SharedTables) {
    this.#salt = shared?.salt ?? crypto.randomUUID();
    if (shared) this.adopt(shared);
  }

  /**
   * The table `kind:scope` of `capacity` entries: the same buffer while both stay the same.
   *
   * @example
   * ```ts
   * import { PolicyTables } from "./policy_tables.ts";
   * const owner = new PolicyTables();
   * const a = owner.table("rate", "example.com", 1024);
   * const b = new PolicyTables(owner.share()).table("rate", "example.com", 1024);
   * a.table.take(owner.key("203.0.113.7"), 0, { intervalMs: 1000, toleranceMs: 1000 });
   * b.table.take(owner.key("203.0.113.7"), 0, { intervalMs: 1000, toleranceMs: 1000 }).allowed;
   * // false: one bucket in two workers
   * ```
   */
  table(kind: "rate" | "pre" | "ttl", scope: string, capacity: number): NamedTable {
    const name = `${kind}:${scope}:${capacity}`;
    let buffer = this.#buffers.get(name);
    if (!buffer) this.#buffers.set(name, buffer = ClientTable.allocate(capacity));
    return { name, table: new ClientTable(buffer) };
  }

  /** The table key of `client` (salted, so outsiders cannot predict it). */
  key(client: string): bigint {
    return keyOf(this.#salt + client);
  }

  /** Every table and the salt, for another worker to {@link adopt}. */
  share(): SharedTables {
    return { salt: this.#salt, tables: [...this.#buffers] };
  }

  /** Takes worker 0's tables (and salt) in place of this worker's own. */
  adopt(shared: SharedTables): void {
    this.#salt = shared.salt;
    this.#buffers.clear();
    for (const [name, buffer] of shared.tables) this.#buffers.set(name, buffer);
  }

  /** Drops every table not named in `names` (a generation still holding one keeps using it). */
  retain(names: ReadonlySet<string>): void {
    for (const name of this.#buffers.keys()) if (!names.has(name)) this.#buffers.delete(name);
  }

  /** Tables held now. */
  get size(): number {
    return this.#buffers.size;
  }
}
