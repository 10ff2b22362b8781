/**
 * Where log lines leave the process: a bounded, non-blocking writer per stream (stdout for the
 * access log, stderr for diagnostics), one per isolate. Serving never waits for a log reader.
 *
 * Why: a log line written with `writeSync` blocks the isolate's event loop until the kernel takes
 * it. With stdout a pipe whose reader stalled (a log shipper, journald or a container log driver
 * that stopped reading, `serve … | tee` with `tee` stopped), the 64 KiB pipe filled and the public
 * worker stopped answering for the whole stall while every health probe, served by another
 * isolate, said 200 (issue 32: 272–503 answers in 8 s where the same load with stdout on /dev/null
 * got 57,796). An asynchronous `write` on a Deno stdio resource runs on a blocking-thread pool, not
 * on the event loop (measured: a 256 KiB write into a stalled pipe left a 10 ms interval timer
 * ticking 97 times in 1 s). So lines are queued and one write at a time is kept in flight:
 *
 * - The queue is bounded in bytes ({@link DEFAULT_QUEUE_BYTES}). A line that does not fit is
 *   dropped and counted, never waited for; the first drop of an episode is reported (`onEpisode`),
 *   and so is the episode's end, once the queue drained, with how many lines it lost.
 * - A write that fails (the reader is gone: `EPIPE`; `/dev/full`: `ENOSPC`) drops the batch, counts
 *   its lines, and reports the episode like a stall; the next line tries again, so a destination
 *   that recovers is used again.
 * - Batches are whole lines of at most {@link PIPE_BUF} bytes where possible: a write of up to
 *   `PIPE_BUF` bytes to a pipe is atomic (POSIX), so the lines of several isolates sharing one
 *   stdout never interleave inside a line. A longer line is written alone.
 *
 * What is lost, when: lines queued beyond the bound while the reader stalls; lines in a batch whose
 * write failed; lines still queued when the process is killed (an orderly stop flushes for up to
 * {@link FLUSH_MS}). Counts are in `/metrics` (`portcullis_log_lines_total{outcome="dropped"}`).
 *
 * @module
 */

/** Bytes a stream may hold queued before lines are dropped. */
export const DEFAULT_QUEUE_BYTES = 1024 * 1024;

/** The largest write a pipe takes atomically on Linux (POSIX: at least 512). */
export const PIPE_BUF = 4096;

/** How long an orderly stop waits for queued lines to be written. */
export const FLUSH_MS = 1000;

/** What writes a batch: resolves with the bytes taken (like `Deno.Writer.write`). */
export type BatchWrite = (bytes: Uint8Array) => Promise<number>;

/** A report about a stream's losses: an episode began (`dropping`) or ended (`resumed`). */
export interface LogEpisode {
  readonly stream: string;
  readonly state: "dropping" | "resumed";
  /** Why lines are dropped: the queue is full (`stalled`) or a write failed (`failed`). */
  readonly cause: "stalled" | "failed";
  /** Lines dropped in this episode so far. */
  readonly dropped: number;
  /** The write error's message, for `failed`. */
  readonly error?: string;
}

/** Options for {@link LogOutlet}. */
export interface LogOutletOptions {
  /** The stream's name in reports and metrics (`stdout`, `stderr`). */
  readonly stream: string;
  readonly write: BatchWrite;
  /** Queue bound in bytes (default {@link DEFAULT_QUEUE_BYTES}). */
  readonly queueBytes?: number;
  /** Told when an episode of losses begins and when it ends. */
  readonly onEpisode?: (episode: LogEpisode) => void;
}

/** A stream's counters. */
export interface LogOutletStats {
  readonly written: number;
  readonly dropped: number;
  readonly episodes: number;
  readonly queuedBytes: number;
}

const encoder = new TextEncoder();

/** A bounded, non-blocking line writer for one stream. */
export class LogOutlet {
  readonly #options: LogOutletOptions;
  readonly #limit: number;
  #queue: Uint8Array[] = [];
  #queued = 0;
  #pumping: Promise<void> | undefined;
  #written = 0;
  #dropped = 0;
  #episodes = 0;
  /** The episode under way: its cause and lines lost so far. */
  #episode: { cause: "stalled" | "failed"; dropped: number } | undefined;
  /** True once a write completed after the last loss: only that ends an episode. */
  #wroteSinceLoss = true;

  /** @param options the stream, its writer, the queue bound and the episode listener */
  constructor(options: LogOutletOptions) {
    this.#options = options;
    this.#limit = options.queueBytes ?? DEFAULT_QUEUE_BYTES;
  }

  /** Queues one line (without its newline); drops it when the queue is full. Never throws. */
  push(line: string): void {
    const bytes = encoder.encode(line + "\n");
    if (this.#queued + bytes.byteLength > this.#limit) {
      this.#lose(1, "stalled");
      return;
    }
    this.#queue.push(bytes);
    this.#queued += bytes.byteLength;
    this.#pumping ??= this.#pump();
  }

  /** The stream's counters. */
  get stats(): LogOutletStats {
    return {
      written: this.#written,
      dropped: this.#dropped,
      episodes: this.#episodes,
      queuedBytes: this.#queued,
    };
  }

  /** Resolves once everything queued now was written or dropped, or after `ms`. */
  async flush(ms = FLUSH_MS): Promise<void> {
    let timer: ReturnType<typeof setTimeout> | undefined;
    let late = false;
    const bound = new Promise<void>((resolve) =>
      timer = setTimeout(() => {
        late = true;
        resolve();
      }, ms)
    );
    try {
      while (this.#pumping && !late) await Promise.race([this.#pumping, bound]);
    } finally {
      clearTimeout(timer);
    }
  }

  /** Writes batches until the queue is empty; one write in flight at a time. */
  async #pump(): Promise<void> {
    try {
      while (this.#queue.length > 0) {
        const { bytes, lines } = this.#takeBatch();
        try {
          await this.#writeAll(bytes);
          this.#written += lines;
          this.#wroteSinceLoss = true;
        } catch (error) {
          this.#lose(lines, "failed", error);
        }
      }
    } finally {
      this.#pumping = undefined;
    }
    // A destination that failed the last batch has not recovered: the episode goes on until a
    // later line is written (else every failed batch of a dead reader was an episode of its own).
    if (this.#wroteSinceLoss) this.#endEpisode();
  }

  /** Whole lines from the head of the queue, at most {@link PIPE_BUF} bytes (or one longer line). */
  #takeBatch(): { bytes: Uint8Array; lines: number } {
    let size = 0;
    let lines = 0;
    while (lines < this.#queue.length) {
      const next = this.#queue[lines].byteLength;
      if (lines > 0 && size + next > PIPE_BUF) break;
      size += next;
      lines++;
    }
    const taken = this.#queue.splice(0, lines);
    this.#queued -= size;
    if (lines === 1) return { bytes: taken[0], lines };
    const bytes = new Uint8Array(size);
    let offset = 0;
    for (const piece of taken) {
      bytes.set(piece, offset);
      offset += piece.byteLength;
    }
    return { bytes, lines };
  }

  async #writeAll(bytes: Uint8Array): Promise<void> {
    let rest = bytes;
    while (rest.byteLength > 0) {
      const taken = await this.#options.write(rest);
      if (!(taken > 0)) throw new Error(`${this.#options.stream} accepted no bytes`);
      rest = rest.subarray(taken);
    }
  }

  /** Counts lost lines; the first loss of an episode is reported. */
  #lose(lines: number, cause: "stalled" | "failed", error?: unknown): void {
    this.#dropped += lines;
    this.#wroteSinceLoss = false;
    if (this.#episode) {
      this.#episode.dropped += lines;
      return;
    }
    this.#episode = { cause, dropped: lines };
    this.#episodes++;
    this.#report({
      stream: this.#options.stream,
      state: "dropping",
      cause,
      dropped: lines,
      error: error === undefined ? undefined : (error as Error)?.message ?? String(error),
    });
  }

  /** The queue drained with its last batch written: an episode under way is over. */
  #endEpisode(): void {
    const episode = this.#episode;
    if (!episode) return;
    this.#episode = undefined;
    this.#report({
      stream: this.#options.stream,
      state: "resumed",
      cause: episode.cause,
      dropped: episode.dropped,
    });
  }

  #report(episode: LogEpisode): void {
    try {
      this.#options.onEpisode?.(episode);
    } catch { /* a report must not break logging */ }
  }
}

/** The sentence a diagnostic log writes for an episode. */
export function episodeLine(episode: LogEpisode): string {
  const why = episode.cause === "stalled"
    ? "its reader does not keep up"
    : `a write failed${episode.error ? ` (${episode.error})` : ""}`;
  return episode.state === "dropping"
    ? `portcullis: warning: log lines on ${episode.stream} are being dropped: ${why}; ` +
      'they are counted in portcullis_log_lines_total{outcome="dropped"}'
    : `portcullis: info: log lines on ${episode.stream} are written again; ` +
      `${episode.dropped} were dropped meanwhile`;
}

/** The two outlets of an isolate. */
export interface StandardOutlets {
  readonly stdout: LogOutlet;
  readonly stderr: LogOutlet;
}

/** Where the isolate's outlets are kept: one pair per global scope (per isolate). */
const OUTLETS = Symbol.for("portcullis.log-outlets");

/** The streams, in the order their counters are kept (`COUNTER_INDEX.log*` in ledger/memory.ts). */
export const LOG_STREAMS: readonly (keyof StandardOutlets)[] = ["stdout", "stderr"];

/**
 * Waits (at most `ms`) for the isolate's queued log lines to be written: an orderly stop calls it
 * before the process or worker ends.
 */
export async function flushStandardOutlets(ms = FLUSH_MS): Promise<void> {
  const holder = globalThis as { [OUTLETS]?: StandardOutlets };
  const outlets = holder[OUTLETS];
  if (!outlets) return;
  await Promise.all([outlets.stdout.flush(ms), outlets.stderr.flush(ms)]);
}

/**
 * The isolate's stdout and stderr outlets, made on first use. They wrap process-wide descriptors,
 * so an isolate has exactly one of each: two outlets on one descriptor would each keep their own
 * bound and reorder lines between them. An episode on either stream is told on stderr.
 */
export function standardOutlets(): StandardOutlets {
  const holder = globalThis as { [OUTLETS]?: StandardOutlets };
  return holder[OUTLETS] ??= makeStandardOutlets();
}

function makeStandardOutlets(): StandardOutlets {
  let stderr: LogOutlet | undefined = undefined;
  const onEpisode = (episode: LogEpisode) => {
    // An episode of stderr's own is counted, not written into the stream that is losing lines.
    if (episode.stream !== "stderr") stderr?.push(stampedLine(episodeLine(episode)));
  };
  stderr = new LogOutlet({ stream: "stderr", write: (b) => Deno.stderr.write(b), onEpisode });
  const stdout = new LogOutlet({ stream: "stdout", write: (b) => Deno.stdout.write(b), onEpisode });
  return { stdout, stderr };
}

/** An episode sentence as the JSON line the diagnostic log writes (kept free of diag.ts). */
function stampedLine(sentence: string): string {
  const level = sentence.includes("warning:") ? "warn" : "info";
  const msg = sentence.replace(/^portcullis: (warning|info): /, "");
  return JSON.stringify({ time: new Date().toISOString(), level, msg });
}
