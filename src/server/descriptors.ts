/**
 * File descriptors: the process's open-file limit, a reserve for the protected lanes under it, and
 * recovery when the limit is hit anyway.
 *
 * **The limit.** Deno lets nothing short of `--allow-all` read `/proc` (so neither
 * `/proc/self/limits` nor `/proc/self/fd`), and has no `getrlimit`. The limit is therefore
 * measured the way the kernel enforces it: at boot, before any listener, the gateway opens its own
 * config file read-only until `open` fails with `EMFILE` or a ceiling is reached, then closes them
 * all. Descriptors are numbered from the lowest free one, so the highest number handed out plus one
 * is the limit (`RLIMIT_NOFILE`). The ceiling is what the configured lanes could ever use; a limit
 * above it is reported as "at least". About 20 µs per descriptor here: 0.1–0.15 s at boot for the
 * default lanes (a ceiling of ~4.7k), 25 ms under a limit of 1024.
 *
 * **The reserve.** Unless the operator sets it, the public lane's `max_connections` is what the
 * limit leaves after the protected lanes' `max_connections`, one upstream connection per
 * application slot and a margin for the runtime, listeners and files ({@link publicCeiling}):
 * a flood of idle public connections is refused by the ledger before it can take the descriptors
 * a health probe needs.
 *
 * **Recovery.** Deno 2.9.6's `node:net` listener stops accepting for good after one `accept` fails
 * with `EMFILE`, and says nothing (measured; libuv proper would retry). So each isolate checks once
 * a second whether a descriptor can be opened ({@link DescriptorWatch}); it logs the transition
 * once each way, counts it, and when descriptors are free again re-arms its listeners (closes the
 * listening socket and binds the same address again; open connections are not touched).
 *
 * @module
 */
import fs from "node:fs";

/**
 * The open-file limit as measured.
 *
 * @internal
 */
export interface DescriptorLimit {
  /** The limit, or (when `exact` is false) a number it is at least. */
  readonly limit: number;
  /** True when `open` failed with `EMFILE` at `limit` open descriptors. */
  readonly exact: boolean;
}

/** True for "too many open files" (`EMFILE` for the process, `ENFILE` for the system). */
export function isExhaustion(error: unknown): boolean {
  for (let e = error; e instanceof Error; e = e.cause) {
    const code = (e as { code?: unknown }).code;
    if (code === "EMFILE" || code === "ENFILE" || /too many open files/i.test(e.message)) {
      return true;
    }
  }
  return false;
}

/**
 * Measures the open-file limit by opening `path` until `EMFILE` or `ceiling` descriptors.
 *
 * @param path a file this process may read (the config file)
 * @param ceiling the most descriptors to open
 * @returns the limit, exact or "at least"; undefined when it cannot be measured (the file cannot
 *   be opened, or the system-wide table is full)
 */
export function probeDescriptorLimit(path: string, ceiling: number): DescriptorLimit | undefined {
  const held: number[] = [];
  let highest = -1;
  try {
    while (held.length < ceiling) {
      const fd = fs.openSync(path, "r");
      held.push(fd);
      if (fd > highest) highest = fd;
    }
    return { limit: highest + 1, exact: false };
  } catch (error) {
    const code = (error as { code?: unknown }).code;
    if (code !== "EMFILE" || highest < 0) return undefined;
    return { limit: highest + 1, exact: true };
  } finally {
    for (const fd of held) fs.closeSync(fd);
  }
}

/** Descriptors kept for the runtime itself, listeners, watched folders and files. */
export const RUNTIME_DESCRIPTORS = 48;

/** What the descriptor budget is made of. */
export interface DescriptorBudget {
  /** The measured limit. */
  readonly limit: DescriptorLimit;
  /** The protected lanes' `max_connections`, summed. */
  readonly protectedConnections: number;
  /** The ledger's application slots: at most one upstream connection each in use. */
  readonly applicationSlots: number;
}

/**
 * The public lane's default `max_connections` under the limit: what is left after the protected
 * lanes, the upstream connections and the runtime, never more than `preferred` (the lane's own
 * default) and never less than 1.
 */
export function publicCeiling(budget: DescriptorBudget, preferred: number): number {
  const left = budget.limit.limit - reservedDescriptors(budget);
  return Math.max(1, Math.min(preferred, left));
}

/** The descriptors kept away from public connections. */
export function reservedDescriptors(budget: DescriptorBudget): number {
  return budget.protectedConnections + budget.applicationSlots + RUNTIME_DESCRIPTORS;
}

/** The probe's ceiling for a config: enough to tell whether the limit constrains anything. */
export function probeCeiling(budget: Omit<DescriptorBudget, "limit">, preferred: number): number {
  return preferred + budget.protectedConnections + budget.applicationSlots +
    RUNTIME_DESCRIPTORS + 1;
}

/** Options for {@link DescriptorWatch}. */
export interface DescriptorWatchOptions {
  /** A file this process may read; opening it is the check. */
  readonly canary: string;
  /** Milliseconds between checks; default 1000. */
  readonly intervalMs?: number;
  /** Where the two transition lines go. */
  readonly log: (line: string) => void;
  /** Re-arms this isolate's listeners once descriptors are free; resolves to how many. */
  readonly rearm: () => Promise<number>;
  /**
   * Asks every listener to accept again, cheaply, on each check while descriptors are free: an
   * exhaustion shorter than the interval can stop a listener without the check ever seeing it.
   */
  readonly nudge?: () => void;
  /** Called after each check (the edge publishes the state and its socket counts). */
  readonly report?: (state: DescriptorState) => void;
}

/** What {@link DescriptorWatch} reports. */
export interface DescriptorState {
  readonly exhausted: boolean;
  /** Times descriptors ran out (transitions into exhaustion). */
  readonly exhaustions: number;
  /** Listeners re-armed after exhaustion. */
  readonly rearms: number;
}

/** Notices descriptor exhaustion in one isolate and re-arms its listeners after it. */
export class DescriptorWatch {
  readonly #options: DescriptorWatchOptions;
  #exhausted = false;
  #exhaustions = 0;
  #rearms = 0;
  #timer: number | undefined;
  #checking = false;

  constructor(options: DescriptorWatchOptions) {
    this.#options = options;
  }

  /** Starts checking (idempotent). */
  start(): void {
    if (this.#timer !== undefined) return;
    // Deno's timers are numbers (node's types say Timeout); unref: it must not keep a process up.
    const timer = setInterval(() => void this.check(), this.#options.intervalMs ?? 1000);
    Deno.unrefTimer(timer);
    this.#timer = timer as unknown as number;
  }

  /** Stops checking. */
  stop(): void {
    if (this.#timer !== undefined) clearInterval(this.#timer);
    this.#timer = undefined;
  }

  /** The state for `/v1/health` and `/metrics`. */
  state(): DescriptorState {
    return { exhausted: this.#exhausted, exhaustions: this.#exhaustions, rearms: this.#rearms };
  }

  /** Records a "too many open files" error seen elsewhere (a connect, a file read). */
  note(error: unknown): void {
    if (isExhaustion(error)) this.#enter();
  }

  /** One check: can a descriptor be opened now? Re-arms after an exhaustion. */
  async check(): Promise<void> {
    if (this.#checking) return;
    this.#checking = true;
    try {
      let free = true;
      try {
        fs.closeSync(fs.openSync(this.#options.canary, "r"));
      } catch (error) {
        if (!isExhaustion(error)) return; // the canary moved: no news about descriptors
        free = false;
      }
      if (!free) return this.#enter();
      if (!this.#exhausted) return this.#options.nudge?.();
      this.#exhausted = false;
      const count = await this.#options.rearm();
      this.#rearms += count;
      this.#options.log(
        `portcullis: descriptors are free again: ${count} listener${count === 1 ? "" : "s"} ` +
          "re-armed",
      );
    } finally {
      this.#checking = false;
      this.#options.report?.(this.state());
    }
  }

  #enter(): void {
    if (this.#exhausted) return;
    this.#exhausted = true;
    this.#exhaustions++;
    this.#options.log(
      "portcullis: warning: out of file descriptors (EMFILE): new connections wait in the " +
        "accept queue until descriptors are free, then the listeners are re-armed",
    );
  }
}

/**
 * The open-file limit as planned with (see server/descriptors.ts).
 *
 * @internal
 */
export interface DescriptorPlan {
  readonly limit: DescriptorLimit;
  /** Descriptors kept away from public connections. */
  readonly reserved: number;
  /** The public lane's `max_connections`, and whether the limit chose it. */
  readonly publicConnections: number;
  readonly derived: boolean;
}
