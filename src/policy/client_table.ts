/**
 * Per-client limiter state (GCRA arrival time, denial run, TTL block) in one bounded hash table
 * over one `SharedArrayBuffer`, so all request workers share one limit per client instead of one
 * each (issue 19: `workers: N` gave a client N times its limit). Each worker builds a
 * {@link ClientTable} over the same buffer; every field goes through `Atomics` and every operation
 * is synchronous and lock-free, so no lock can be held across an await or by a dead worker.
 *
 * **Layout.** A 32-byte header (capacity, slots used, evictions), then {@link ENTRY_BYTES} = 40
 * bytes an entry: key, arrival time (µs), last seen (µs), blocked until (µs) as BigInt64, denials
 * in a row as Int32 (+4 padding). A million entries take 40 MiB.
 *
 * **Keys** are 64-bit hashes the caller computes ({@link keyOf} over salted text). Keys that
 * collide (2^-64 per pair) share one entry: one bucket, one denial run, one block. Key 0 marks a
 * free slot, so 0 is stored as 1 (hashes 0 and 1 share an entry too).
 *
 * **Claiming.** A key lives within {@link PROBE_WINDOW} slots of its home slot. A free slot is
 * claimed by compare-and-swap of its key from 0; slots never become free again, so a scan that
 * meets a free slot knows the key is absent. A full window's least recently seen entry is taken
 * over by compare-and-swap of its key, then each field is reset by compare-and-swap from the value
 * read before, so a reset never erases what the new owner's workers wrote since.
 *
 * **Races**, all bounded. Two workers evicting one slot: one swap wins, the other rescans. Two
 * workers picking different victims for one new key (their scans saw different last-seen times)
 * put it in two slots; lookups use the first, so that client got one extra fresh bucket once. A
 * worker acting for the evicted client in the nanoseconds of the take-over may leave its state
 * (arrival time, denials, even a block) in the new owner's entry: wrongly strict. No race makes a
 * state more permissive than a fresh bucket (arrival ≤ now, no denials, no block): that is the
 * most permissive state there is, and every value written is a reset or one some worker computed
 * for a bucket. The worst case is a client's state reset to fresh.
 *
 * @module
 */

const HEADER_BYTES = 32;
const HEADER = { capacity: 0, used: 1, evictions: 2 } as const;
/** 64-bit words per entry, and each field's offset in them. */
const STRIDE = 5;
const FIELD = { key: 0, tat: 1, seen: 2, blocked: 3, denials: 4 } as const;
/** Bytes each entry takes in the buffer (the buffer adds a 32-byte header). */
export const ENTRY_BYTES = STRIDE * 8;
/** Slots scanned from a key's home slot before the least recently seen one is evicted. */
export const PROBE_WINDOW = 8;
const MAX_CAPACITY = 2 ** 24;

/** A GCRA rate: one token every `intervalMs`, arrival time at most `toleranceMs` ahead of now. */
export interface GcraRate {
  readonly intervalMs: number;
  /** `burst × intervalMs`. */
  readonly toleranceMs: number;
}

/** What {@link ClientTable.take} decided. */
export interface TableDecision {
  allowed: boolean;
  /** The theoretical arrival time after the decision, in ms (whole microseconds). */
  tatMs: number;
  /** How far that is ahead of `now` (ms, whole microseconds, exact): may be negative. */
  aheadMs: number;
  /** Denials in a row for this key (0 after an admission). */
  denialsInARow: number;
}

/** How full the table is. */
export interface TableStats {
  capacity: number;
  /** Slots holding a key (a key raced into two slots counts twice). */
  used: number;
  /** Entries taken over by a new key. */
  evictions: number;
}

/** A view over a shared client table; build one per worker over the same buffer. */
export class ClientTable {
  readonly #words: BigInt64Array;
  readonly #ints: Int32Array;
  readonly #mask: number;
  readonly #window: number;
  readonly #decision: TableDecision = { allowed: true, tatMs: 0, aheadMs: 0, denialsInARow: 0 };
  #intervalMs = NaN;
  #toleranceMs = NaN;
  #intervalUs = 0n;
  #toleranceUs = 0n;

  /**
   * Allocates a table of `capacity` entries rounded up to a power of two: 32 + 40 × entries bytes.
   *
   * @throws {RangeError} when `capacity` is not an integer in 1..2^24
   */
  static allocate(capacity: number): SharedArrayBuffer {
    if (!Number.isInteger(capacity) || capacity < 1 || capacity > MAX_CAPACITY) {
      throw new RangeError(`Client table capacity "${capacity}" is outside 1..${MAX_CAPACITY}`);
    }
    let entries = 1;
    while (entries < capacity) entries *= 2;
    const buffer = new SharedArrayBuffer(HEADER_BYTES + entries * ENTRY_BYTES);
    new BigInt64Array(buffer)[HEADER.capacity] = BigInt(entries);
    return buffer;
  }

  /**
   * @param buffer a buffer from {@link ClientTable.allocate}, possibly from another worker
   * @throws {TypeError} when `buffer` is not one
   * @example
   * ```ts
   * import { ClientTable, keyOf } from "./client_table.ts";
   * const buffer = ClientTable.allocate(1024);
   * const a = new ClientTable(buffer), b = new ClientTable(buffer);
   * const rate = { intervalMs: 1000, toleranceMs: 1000 };
   * a.take(keyOf("salt|203.0.113.7"), 0, rate).allowed; // true
   * b.take(keyOf("salt|203.0.113.7"), 0, rate).allowed; // false: one bucket
   * ```
   */
  constructor(buffer: SharedArrayBuffer) {
    const bytes = buffer instanceof SharedArrayBuffer ? buffer.byteLength : -1;
    const capacity = bytes >= HEADER_BYTES && bytes % 8 === 0
      ? Number(new BigInt64Array(buffer, 0, 1)[0])
      : 0;
    if (
      capacity < 1 || (capacity & (capacity - 1)) !== 0 ||
      bytes !== HEADER_BYTES + capacity * ENTRY_BYTES
    ) {
      throw new TypeError(`Buffer of ${bytes} bytes is not from ClientTable.allocate()`);
    }
    this.#words = new BigInt64Array(buffer);
    this.#ints = new Int32Array(buffer);
    this.#mask = capacity - 1;
    this.#window = Math.min(PROBE_WINDOW, capacity);
  }

  /**
   * Spends one token of `key`'s bucket at `nowMs` (GCRA, the rule of `ClientRateLimiter.take()`):
   * allowed when `max(tat, now) + interval - now <= tolerance`, which moves the arrival time
   * there and ends the denial run; otherwise the run grows by one. Times are whole microseconds,
   * `nowMs` at least 0.
   *
   * @returns the decision (a reused object: read it before the next call)
   */
  take(key: bigint, nowMs: number, rate: GcraRate): TableDecision {
    const now = micros(nowMs);
    const base = this.#claim(storedKey(key), now);
    const words = this.#words;
    Atomics.store(words, base + FIELD.seen, now);
    this.#compile(rate);
    const interval = this.#intervalUs, tolerance = this.#toleranceUs;
    for (;;) {
      const tat = Atomics.load(words, base + FIELD.tat);
      const next = (tat > now ? tat : now) + interval;
      if (next - now > tolerance) return this.#decide(false, tat, now, base);
      if (Atomics.compareExchange(words, base + FIELD.tat, tat, next) === tat) {
        return this.#decide(true, next, now, base);
      }
    }
  }

  /**
   * Moves `key`'s arrival time forward to `tatMs` (never back): the fleet store's answer, kept so
   * that a decision made here while the store is away goes on from the fleet's state instead of
   * a fresh bucket. `nowMs` counts as a sighting.
   */
  advance(key: bigint, tatMs: number, nowMs: number): void {
    const tat = micros(tatMs), now = micros(nowMs);
    const words = this.#words;
    const base = this.#claim(storedKey(key), now);
    Atomics.store(words, base + FIELD.seen, now);
    for (;;) {
      const held = Atomics.load(words, base + FIELD.tat);
      if (held >= tat || Atomics.compareExchange(words, base + FIELD.tat, held, tat) === held) {
        return;
      }
    }
  }

  /** Blocks `key` until `untilMs`, replacing any earlier block; `nowMs` counts as a sighting. */
  block(key: bigint, untilMs: number, nowMs: number): void {
    const stored = storedKey(key), now = micros(nowMs), until = micros(untilMs);
    const words = this.#words;
    const base = this.#claim(stored, now);
    Atomics.store(words, base + FIELD.seen, now);
    Atomics.store(words, base + FIELD.blocked, until);
    if (Atomics.load(words, base + FIELD.key) !== stored) {
      Atomics.compareExchange(words, base + FIELD.blocked, until, 0n); // the slot changed hands
    }
  }

  /** When `key`'s block ends (ms), or undefined when it is not blocked at `nowMs`. */
  blockedUntil(key: bigint, nowMs: number): number | undefined {
    const base = this.#find(storedKey(key));
    if (base < 0) return undefined;
    const now = micros(nowMs);
    const until = Atomics.load(this.#words, base + FIELD.blocked);
    if (until <= now) return undefined;
    Atomics.store(this.#words, base + FIELD.seen, now); // a blocked client that keeps coming stays
    return Number(until) / 1000;
  }

  /** Capacity, slots used and evictions so far, across every view of the buffer. */
  stats(): TableStats {
    const count = (slot: number) => Number(Atomics.load(this.#words, slot));
    return {
      capacity: this.#mask + 1,
      used: count(HEADER.used),
      evictions: count(HEADER.evictions),
    };
  }

  #decide(allowed: boolean, tat: bigint, now: bigint, base: number): TableDecision {
    const at = (base + FIELD.denials) * 2;
    const decision = this.#decision;
    decision.allowed = allowed;
    decision.tatMs = Number(tat) / 1000;
    decision.aheadMs = Number(tat - now) / 1000;
    if (allowed) Atomics.store(this.#ints, at, 0);
    decision.denialsInARow = allowed ? 0 : Atomics.add(this.#ints, at, 1) + 1;
    return decision;
  }

  #compile(rate: GcraRate): void {
    if (rate.intervalMs === this.#intervalMs && rate.toleranceMs === this.#toleranceMs) return;
    this.#intervalUs = BigInt(Math.max(1, Math.round(rate.intervalMs * 1000)));
    this.#toleranceUs = BigInt(Math.round(rate.toleranceMs * 1000));
    this.#intervalMs = rate.intervalMs;
    this.#toleranceMs = rate.toleranceMs;
  }

  /** The first word of `key`'s entry, or -1 when it has none. */
  #find(key: bigint): number {
    const home = this.#home(key);
    for (let i = 0; i < this.#window; i++) {
      const base = entryBase((home + i) & this.#mask);
      const held = Atomics.load(this.#words, base);
      if (held === key) return base;
      if (held === 0n) return -1;
    }
    return -1;
  }

  /** The first word of `key`'s entry, claiming a free slot or the least recently seen one. */
  #claim(key: bigint, now: bigint): number {
    const words = this.#words, home = this.#home(key);
    for (;;) {
      let victim = -1, victimKey = 0n, oldest = 0n;
      for (let i = 0; i < this.#window; i++) {
        const base = entryBase((home + i) & this.#mask);
        let held = Atomics.load(words, base);
        if (held === 0n) {
          held = Atomics.compareExchange(words, base, 0n, key);
          if (held === 0n) return this.#claimed(base, now, HEADER.used); // fields are all 0
        }
        if (held === key) return base;
        const seen = Atomics.load(words, base + FIELD.seen);
        if (victim < 0 || seen < oldest) {
          victim = base;
          victimKey = held;
          oldest = seen;
        }
      }
      if (this.#evict(victim, victimKey, key)) return this.#claimed(victim, now, HEADER.evictions);
    }
  }

  /**
   * Hands the entry at `base` from `victim` to `key`, then resets the victim's fields. Each reset
   * is a compare-and-swap from the value read before the hand-over, so it never undoes what the
   * new owner's workers wrote since: they see the victim's state (never more permissive than a
   * fresh bucket) or a fresh one.
   */
  #evict(base: number, victim: bigint, key: bigint): boolean {
    const words = this.#words, ints = this.#ints, denials = (base + FIELD.denials) * 2;
    const tat = Atomics.load(words, base + FIELD.tat);
    const blocked = Atomics.load(words, base + FIELD.blocked);
    const run = Atomics.load(ints, denials);
    if (Atomics.compareExchange(words, base, victim, key) !== victim) return false;
    Atomics.compareExchange(words, base + FIELD.tat, tat, 0n); // arrival times only grow
    Atomics.compareExchange(words, base + FIELD.blocked, blocked, 0n);
    Atomics.compareExchange(ints, denials, run, 0);
    return true;
  }

  /** Marks a just-claimed entry seen and counts the claim in header slot `counter`. */
  #claimed(base: number, now: bigint, counter: number): number {
    Atomics.store(this.#words, base + FIELD.seen, now);
    Atomics.add(this.#words, counter, 1n);
    return base;
  }

  /** The home slot: the key's halves mixed (murmur3 finalizer), so weak low bits still spread. */
  #home(key: bigint): number {
    let h = Number(BigInt.asUintN(32, key)) ^ Math.imul(Number(key >> 32n) | 0, 0x85ebca6b);
    h = Math.imul(h ^ (h >>> 16), 0x7feb352d);
    h = Math.imul(h ^ (h >>> 15), 0x846ca68b);
    return (h ^ (h >>> 16)) & this.#mask;
  }
}

/** The first 64-bit word of entry `slot`. */
function entryBase(slot: number): number {
  return HEADER_BYTES / 8 + slot * STRIDE;
}

/** `key` as its signed 64-bit word, 0 moved to 1 (0 marks a free slot). */
function storedKey(key: bigint): bigint {
  const word = BigInt.asIntN(64, key);
  return word === 0n ? 1n : word;
}

/** Milliseconds as whole microseconds. */
function micros(ms: number): bigint {
  return BigInt(Math.round(ms * 1000));
}

/** A 64-bit key from its high and low 32-bit halves (each taken as unsigned). */
export function keyFromHalves(hi: number, lo: number): bigint {
  return (BigInt(hi >>> 0) << 32n) | BigInt(lo >>> 0);
}

/**
 * FNV-1a 64 of `text`'s UTF-8 bytes (lone surrogates as U+FFFD, like `TextEncoder`), as an
 * unsigned 64-bit key. Not cryptographic: salt the text (per tenant, per boot) so a client cannot
 * aim its keys at one probe window.
 *
 * @example
 * ```ts
 * import { keyOf } from "./client_table.ts";
 * keyOf("a"); // 0xaf63dc4c8601ec8cn
 * ```
 */
export function keyOf(text: string): bigint {
  // 16-bit limbs keep every product a small integer: twice as fast as 32-bit halves as doubles
  let h0 = 0x2325, h1 = 0x8422, h2 = 0x9ce4, h3 = 0xcbf2;
  for (let i = 0; i < text.length; i++) {
    let point = text.charCodeAt(i), count = 1;
    if (point >= 0x80) {
      const next = i + 1 < text.length ? text.charCodeAt(i + 1) : 0;
      if (point >= 0xd800 && point < 0xdc00 && next >= 0xdc00 && next < 0xe000) {
        point = 0x10000 + ((point - 0xd800) << 10) + (next - 0xdc00);
        count = 4;
        i++;
      } else {
        if (point >= 0xd800 && point < 0xe000) point = 0xfffd; // a lone surrogate
        count = point < 0x800 ? 2 : 3;
      }
    }
    for (let k = 0; k < count; k++) { // hash ^= byte; hash *= 2^40 + 0x1b3 (mod 2^64)
      h0 ^= utf8Byte(point, count, k);
      const t0 = h0 * 0x1b3, t1 = h1 * 0x1b3 + (t0 >>> 16);
      const t2 = h2 * 0x1b3 + (h0 << 8) + (t1 >>> 16);
      h3 = (h3 * 0x1b3 + (h1 << 8) + (t2 >>> 16)) & 0xffff;
      h0 = t0 & 0xffff;
      h1 = t1 & 0xffff;
      h2 = t2 & 0xffff;
    }
  }
  return (BigInt(((h3 << 16) | h2) >>> 0) << 32n) | BigInt(((h1 << 16) | h0) >>> 0);
}

/** Byte `k` of code point `point` in UTF-8, which takes `count` bytes for it. */
function utf8Byte(point: number, count: number, k: number): number {
  if (count === 1) return point;
  const shifted = point >> (6 * (count - 1 - k));
  return k === 0 ? ((0xf00 >> count) & 0xff) | shifted : 0x80 | (shifted & 63);
}
