/**
 * The hub's side of the config stream: the file sets of recent generations, and the answer to one
 * long poll. A node says which set it has (`have`, a hash); it gets the whole live set (a
 * snapshot) when the hub does not know that hash, the changed and removed files (a delta) when it
 * does, and otherwise its request is held until something changes or the hold ends (`current`).
 * Every answer carries the hub's last rejection, so a bad push is visible on the edges too.
 *
 * @module
 */
import { Buffer } from "node:buffer";
import type { FileSet } from "../config/file_set.ts";
import { type ConfigStatus, configStatus, type ConfigStore } from "../live/generations.ts";
import { formatPath } from "../config/problems.ts";
import { HeldPolls } from "../live/backoff.ts";

/** One generation the hub can answer from. */
interface Published {
  readonly number: number;
  readonly hash: string;
  readonly files: FileSet;
}

/**
 * What every answer says about the hub itself.
 *
 * @internal
 */
export interface HubNote {
  readonly node_id: string;
  readonly generation: number;
  readonly loaded_at: string;
  readonly last_rejected: ConfigStatus["last_rejected"];
}

/** One answer of `GET /v1/config/stream`. Files are base64. */
export type StreamAnswer =
  | {
    readonly type: "snapshot";
    readonly generation: number;
    readonly hash: string;
    readonly files: Record<string, string>;
    readonly hub: HubNote;
  }
  | {
    readonly type: "delta";
    readonly from: string;
    readonly generation: number;
    readonly hash: string;
    readonly changed: Record<string, string>;
    readonly removed: string[];
    readonly hub: HubNote;
  }
  | {
    readonly type: "current";
    readonly generation: number;
    readonly hash: string;
    readonly hub: HubNote;
  };

/**
 * The published generations of one hub, newest last.
 *
 * @internal
 */
export class ConfigFeed {
  readonly #store: ConfigStore;
  readonly #nodeId: string;
  readonly #keep: number;
  readonly #history: Published[] = [];
  readonly #held = new HeldPolls();

  /**
   * @param store the hub's generations; each one it swaps in must carry its `files`
   * @param options the hub's node id, and how many generations to keep for deltas
   */
  constructor(store: ConfigStore, options: { nodeId: string; history: number }) {
    const first = store.current.files;
    if (!first) throw new RangeError("A hub generation must carry its files");
    this.#store = store;
    this.#nodeId = options.nodeId;
    this.#keep = options.history;
    this.#history.push({ number: store.current.number, hash: store.current.hash, files: first });
    store.onSwap((generation) => {
      const files = generation.files;
      if (!files) throw new RangeError("A hub generation must carry its files");
      this.#history.push({ number: generation.number, hash: generation.hash, files });
      if (this.#history.length > this.#keep) this.#history.shift();
    });
    store.onStatus(() => this.#held.wake());
  }

  /** The live generation's number and hash. */
  get live(): { readonly number: number; readonly hash: string } {
    return this.#history[this.#history.length - 1];
  }

  /** Requests held right now. */
  get waiting(): number {
    return this.#held.size;
  }

  /**
   * Answers one poll.
   *
   * @param node `have`: the hash the node serves ("" for none); `seen`: the hash of a set it
   *   received but does not serve (waiting for its cache, or refused), or "" — while that is the
   *   live set the node is held and answered `current` like a current node (sending the set again
   *   would change nothing), though its `have` stays what it serves
   * @param holdMs how long to hold a node that is current (0 answers at once)
   * @param signal ends the hold early (the node went away, or the hub is stopping)
   */
  async answer(
    node: { readonly have: string; readonly seen?: string },
    holdMs: number,
    signal?: AbortSignal,
  ): Promise<StreamAnswer> {
    const { have, seen = "" } = node;
    const known = (hash: string) => hash !== "" && hash === this.live.hash;
    if ((known(have) || known(seen)) && holdMs > 0 && !signal?.aborted) {
      await this.#held.hold(holdMs, signal);
    }
    return this.#answerNow(have, seen);
  }

  #answerNow(have: string, seen: string): StreamAnswer {
    const live = this.#history[this.#history.length - 1];
    const hub = this.#note();
    if (have === live.hash || (seen !== "" && seen === live.hash)) {
      return { type: "current", generation: live.number, hash: live.hash, hub };
    }
    const base = this.#history.find((p) => p.hash === have);
    if (!base) {
      return {
        type: "snapshot",
        generation: live.number,
        hash: live.hash,
        files: encodeFiles(live.files, [...live.files.keys()]),
        hub,
      };
    }
    const changed = [...live.files.keys()].filter((name) => {
      const before = base.files.get(name);
      return !before || !sameBytes(before, live.files.get(name)!);
    });
    const removed = [...base.files.keys()].filter((name) => !live.files.has(name));
    return {
      type: "delta",
      from: have,
      generation: live.number,
      hash: live.hash,
      changed: encodeFiles(live.files, changed),
      removed,
      hub,
    };
  }

  #note(): HubNote {
    const status = configStatus(this.#store, (p) => formatPath(p.path));
    return {
      node_id: this.#nodeId,
      generation: status.generation,
      loaded_at: status.loaded_at,
      last_rejected: status.last_rejected,
    };
  }

  /** Releases every held request (they are answered `current`). */
  close(): void {
    this.#held.wake();
  }
}

function encodeFiles(files: FileSet, names: readonly string[]): Record<string, string> {
  const out: Record<string, string> = {};
  for (const name of names) out[name] = Buffer.from(files.get(name)!).toString("base64");
  return out;
}

/** True when two buffers hold the same bytes. */
export function sameBytes(a: Uint8Array, b: Uint8Array): boolean {
  if (a.byteLength !== b.byteLength) return false;
  for (let i = 0; i < a.byteLength; i++) if (a[i] !== b[i]) return false;
  return true;
}
