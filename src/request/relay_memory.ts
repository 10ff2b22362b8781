/**
 * Collections paced by the bytes the gateway relays. Deno's `node:net` and `node:http` hand every
 * socket read and every parsed body chunk to JavaScript as a fresh buffer of up to 64 KiB outside
 * the V8 heap; a dead one is freed only when a collection finds it, and V8 paces its collections by
 * the heap, where a relayed body hardly shows. Left alone, 32 concurrent downloads piled up 400–600
 * MB of dead buffers (docs/decisions.md §19). This module lets the relays themselves ask for
 * collections, in two ways an operator sets under `memory`:
 *
 * - `quiet_collect_bytes` (on by default): once this isolate relayed that many bytes since its last
 *   full collection and its relays then stay quiet for a second, one full collection returns what
 *   the transfer left behind. It runs when there is nothing to slow down, once per burst.
 * - `collect_every_bytes` (off by default): a young-generation collection every so many bytes
 *   relayed, which keeps the peak down while bodies stream. It costs throughput — each forced
 *   collection took 30–190 ms under load here (§19) — so it is the operator's trade.
 *
 * The collector is V8's own `gc` function, exposed at run time with `node:v8` and read from a fresh
 * `node:vm` context, so no launch flag is needed. Where it cannot be had, pacing is off and the
 * gateway relays as before.
 *
 * @module
 */
import v8 from "node:v8";
import vm from "node:vm";

/** V8's collector function, as its `--expose-gc` extension defines it. */
export type Collect = (options?: { type?: "minor" | "major" }) => void;

/** How collections follow the relayed bytes (the edge config's `memory`). */
export interface RelayPacing {
  /** Bytes relayed between two young-generation collections; 0: none. */
  readonly collectEvery: number;
  /** Bytes relayed since the last full collection after which a quiet second brings one; 0: none. */
  readonly quietAfter: number;
}

/** The pacing an isolate runs with until its edge config sets one. */
export const DEFAULT_PACING: RelayPacing = { collectEvery: 0, quietAfter: 64 * 1024 * 1024 };

/** How long the relays stay quiet before the full collection. */
export const QUIET_MS = 1000;

/** This isolate's paced collections so far (read by tests and the benchmark). */
export const relayCollections = { young: 0, quiet: 0 };

let pacing: RelayPacing = DEFAULT_PACING;
let collect: Collect | null | undefined;
let sinceYoung = 0;
let sinceFull = 0;
let moved = false;
let quietTimer: ReturnType<typeof setTimeout> | undefined;

/**
 * Sets this isolate's pacing (from the edge config, at boot).
 *
 * @param next the pacing
 * @param collector the collector to call instead of V8's (tests)
 */
export function setRelayPacing(next: RelayPacing, collector?: Collect): void {
  pacing = next;
  if (collector) collect = collector;
  sinceYoung = 0;
  sinceFull = 0;
}

/** This isolate's pacing now. */
export function relayPacing(): RelayPacing {
  return pacing;
}

/**
 * Notes one relayed chunk, and collects when the pace says so.
 *
 * @param bytes the chunk's size
 */
export function relayed(bytes: number): void {
  moved = true;
  if (pacing.collectEvery > 0) {
    sinceYoung += bytes;
    if (sinceYoung >= pacing.collectEvery) {
      sinceYoung = 0;
      const gc = collector();
      if (gc) {
        relayCollections.young++;
        gc({ type: "minor" });
      }
    }
  }
  if (pacing.quietAfter === 0) return;
  sinceFull += bytes;
  if (sinceFull >= pacing.quietAfter && quietTimer === undefined) armQuiet();
}

/** Checks every {@link QUIET_MS}: the first quiet period brings the full collection. */
function armQuiet(): void {
  moved = false;
  const timer = setTimeout(() => {
    quietTimer = undefined;
    if (moved) return armQuiet();
    sinceFull = 0;
    const gc = collector();
    if (!gc) return;
    relayCollections.quiet++;
    gc({ type: "major" });
  }, QUIET_MS);
  quietTimer = timer;
  // A pending collection never keeps a draining process alive.
  Deno.unrefTimer(timer as unknown as number);
}

/** V8's `gc`, exposed once per isolate; null where the runtime refuses it. */
function collector(): Collect | null {
  if (collect !== undefined) return collect;
  try {
    v8.setFlagsFromString("--expose-gc");
    const gc = vm.runInNewContext("gc");
    collect = typeof gc === "function" ? gc as Collect : null;
  } catch {
    collect = null;
  }
  return collect;
}
