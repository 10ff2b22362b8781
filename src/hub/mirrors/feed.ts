/**
 * The hub's side of the door stream: the door views of late, and the answer to one long poll. A
 * door says which view it holds (`have`, a hash); it gets the whole live view (`snapshot`) when the
 * feed does not know that hash, the changed and removed mirrors — and the slug list when it changed
 * — (`delta`) when it does, and otherwise its poll is held until the view changes or the hold
 * ends (`current`). The same shape as the edges' config stream (`../feed.ts`), over a view of a
 * few kilobytes instead of a file set.
 *
 * History is bounded (`doors.history` views): a door further behind gets a snapshot, which is
 * never wrong, only larger.
 *
 * @module
 */
import { diffViews, type DoorAnswer, type DoorView, hashView, sortedView } from "./view.ts";
import { HeldPolls } from "../../live/backoff.ts";

/** One view the feed can answer from. */
interface Published {
  readonly hash: string;
  readonly view: DoorView;
}

/** The door views of one hub, newest last. */
export class DoorFeed {
  readonly #keep: number;
  readonly #history: Published[] = [];
  readonly #held = new HeldPolls();

  /**
   * @param first the view served until the first change
   * @param options how many views to keep for deltas (at least 1)
   */
  constructor(first: DoorView, options: { readonly history: number }) {
    if (options.history < 1) throw new RangeError("A door feed keeps at least one view");
    this.#keep = options.history;
    const view = sortedView(first);
    this.#history.push({ hash: hashView(view), view });
  }

  /** The live view and its hash. */
  get live(): Published {
    return this.#history[this.#history.length - 1];
  }

  /** Polls held right now. */
  get waiting(): number {
    return this.#held.size;
  }

  /**
   * Makes `view` the live view, and wakes every held poll, unless it equals the live one.
   *
   * @returns true when the view changed
   */
  publish(view: DoorView): boolean {
    const sorted = sortedView(view);
    const hash = hashView(sorted);
    if (hash === this.live.hash) return false;
    this.#history.push({ hash, view: sorted });
    if (this.#history.length > this.#keep) this.#history.shift();
    this.#held.wake();
    return true;
  }

  /**
   * Answers one poll.
   *
   * @param have the hash the door holds ("" for none)
   * @param holdMs how long to hold a door that is current (0 answers at once)
   * @param signal ends the hold early (the door went away, the hub is stopping)
   */
  async answer(have: string, holdMs: number, signal?: AbortSignal): Promise<DoorAnswer> {
    if (have !== "" && have === this.live.hash && holdMs > 0 && !signal?.aborted) {
      await this.#held.hold(holdMs, signal);
    }
    return this.#answerNow(have);
  }

  /** Releases every held poll (each is answered `current`). */
  close(): void {
    this.#held.wake();
  }

  #answerNow(have: string): DoorAnswer {
    const live = this.live;
    if (have === live.hash) return { type: "current", hash: live.hash };
    const base = have === "" ? undefined : this.#history.find((p) => p.hash === have);
    if (!base) return { type: "snapshot", hash: live.hash, view: live.view };
    return { type: "delta", from: have, hash: live.hash, ...diffViews(base.view, live.view) };
  }
}
