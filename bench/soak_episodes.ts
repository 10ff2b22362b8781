/**
 * The log episodes of the soak (`BENCH_LOG_EPISODE`, issue 32): a fault on the gateway's access log
 * (stdout) for a sixth of the run, to see that serving goes on and memory and descriptors come back.
 *
 * - `stall`: stdout is a pipe the bench stops reading from `SECONDS/3` for `SECONDS/6`; the 64 KiB
 *   pipe fills and stays full (a log shipper or `serve … | tee` that stopped), then the bench reads
 *   again.
 * - `disk-full`: stdout is a file, opened `O_APPEND` by the shell that execs the gateway, on a
 *   32 MiB tmpfs the bench mounts (root only). Outside the episode the bench truncates the file at
 *   each sample, so it never fills by itself; from `2·SECONDS/3` for `SECONDS/6` a filler file
 *   takes every free byte (`ENOSPC` for the gateway's writes), then it is deleted.
 *
 * A tmpfs rather than a loop-mounted image or `/dev/full`: it is the smallest real file system that
 * fills (so the gateway sees the `ENOSPC` a full `/var/log` gives, and writes again after), and
 * mounting one needs nothing but `mount`.
 *
 * @module
 */

/** The faults a soak can put on the access log. */
export type EpisodeKind = "stall" | "disk-full";

/** The size of the tmpfs the disk-full episode fills. */
const DISK_MB = 32;

/** `BENCH_LOG_EPISODE` read: undefined when unset or empty. */
export function episodeKind(value: string | undefined): EpisodeKind | undefined {
  if (value === undefined || value === "") return undefined;
  if (value === "stall" || value === "disk-full") return value;
  throw new RangeError(`BENCH_LOG_EPISODE must be stall or disk-full, got "${value}"`);
}

/** When an episode runs, in seconds since the load began. */
export interface EpisodeWindow {
  readonly from: number;
  readonly until: number;
}

/** The phase of the run a moment falls in, relative to the episode. */
export type Phase = "before" | "during" | "after";

/** The phase of `seconds` (since the load began) for `window`. */
export function phaseOf(window: EpisodeWindow, seconds: number): Phase {
  return seconds < window.from ? "before" : seconds < window.until ? "during" : "after";
}

/** A tmpfs the bench mounted; `unmount` never throws. */
export interface LogDisk {
  readonly path: string;
  unmount(): Promise<void>;
}

async function run(command: string, args: string[]): Promise<{ ok: boolean; text: string }> {
  const out = await new Deno.Command(command, { args, stdout: "piped", stderr: "piped" }).output();
  const text = new TextDecoder().decode(out.stderr).trim();
  return { ok: out.success, text };
}

/** Mounts a {@link DISK_MB} MiB tmpfs at `path`; returns why not (mount's message) when it cannot. */
export async function mountLogDisk(path: string): Promise<LogDisk | string> {
  await Deno.mkdir(path, { recursive: true });
  const args = ["-t", "tmpfs", "-o", `size=${DISK_MB}m,mode=0755`, "tmpfs", path];
  const mounted = await run("mount", args).catch((error) => ({ ok: false, text: String(error) }));
  if (!mounted.ok) return mounted.text;
  return {
    path,
    async unmount() {
      // A lazy unmount as a fallback: a gateway that did not exit in time still holds its file.
      const done = await run("umount", [path]).catch(() => ({ ok: false, text: "" }));
      if (!done.ok) await run("umount", ["-l", path]).catch(() => {});
    },
  };
}

/** Writes zeros into `file` until the file system is full (`ENOSPC`); returns the bytes written. */
async function fill(file: string): Promise<number> {
  const out = await Deno.open(file, { write: true, create: true, truncate: true });
  const chunk = new Uint8Array(1 << 20);
  let size = chunk.byteLength;
  let total = 0;
  try {
    while (size >= 1) {
      try {
        total += await out.write(chunk.subarray(0, size));
      } catch (error) {
        if ((error as { code?: string }).code !== "ENOSPC") throw error;
        // Smaller and smaller writes take the last pages too.
        size >>= 1;
      }
    }
  } finally {
    out.close();
  }
  return total;
}

/** How the gateway is spawned for an episode. */
export interface EpisodeSpawn {
  readonly command: string;
  readonly args: string[];
  readonly stdout: "piped" | "null";
}

/** One configuration's log episode: how the gateway is spawned, and the fault at its window. */
export interface LogEpisode {
  readonly kind: EpisodeKind;
  readonly window: EpisodeWindow;
  /** True while the fault is on. */
  readonly on: boolean;
  /** What the episode says it did (the filler's size), for the report. */
  readonly notes: readonly string[];
  /** The gateway's command line, stdout redirected to the log file for `disk-full`. */
  spawn(command: string, args: readonly string[]): EpisodeSpawn;
  /** Awaited by the stdout reader before each read: pending while a stall is on. */
  beforeRead(): Promise<void> | undefined;
  /**
   * Called at each sample: outside the episode the log file is emptied; resolves with what it held
   * (empty for `stall`, whose lines the bench reads from the pipe).
   */
  sampled(): Promise<string>;
  /**
   * Puts the fault on at `window.from` and takes it off at `window.until` (seconds after
   * `started`, a `performance.now()`); `signal` ends it early, fault taken off.
   */
  run(started: number, signal: AbortSignal): Promise<void>;
}

/** Resolves at `at` (`performance.now()` ms) or when `signal` aborts, whichever comes first. */
function sleepUntil(at: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const timer = setTimeout(done, Math.max(0, at - performance.now()));
    signal.addEventListener("abort", done, { once: true });
    function done() {
      clearTimeout(timer);
      signal.removeEventListener("abort", done);
      resolve();
    }
  });
}

/**
 * The episode of `kind` for one configuration, over a run of `seconds`.
 *
 * @param disk the mounted tmpfs, for `disk-full`
 * @param name the configuration, naming its files on the tmpfs
 */
export function logEpisode(
  kind: EpisodeKind,
  seconds: number,
  options: { readonly disk?: LogDisk; readonly name: string },
): LogEpisode {
  const from = kind === "stall" ? seconds / 3 : 2 * seconds / 3;
  const window = { from, until: from + seconds / 6 };
  let on = false;
  const notes: string[] = [];
  let reading: Promise<void> | undefined;
  let resume = () => {};
  const log = `${options.disk?.path}/${options.name}-access.log`;
  const filler = `${options.disk?.path}/${options.name}-filler`;
  const start = async () => {
    on = true;
    if (kind === "stall") reading = new Promise((resolve) => resume = resolve);
    else notes.push(`filler took ${(await fill(filler) / 2 ** 20).toFixed(1)} MiB`);
  };
  const stop = async () => {
    if (kind === "stall") {
      reading = undefined;
      resume();
    } else {
      await Deno.remove(filler).catch(() => {});
    }
    on = false;
  };
  return {
    kind,
    window,
    get on() {
      return on;
    },
    notes,
    spawn(command, args) {
      if (kind === "stall") return { command, args: [...args], stdout: "piped" };
      // The shell opens the file O_APPEND and execs: the gateway's fd 1 is the file itself.
      const quoted = `'${log.replaceAll("'", `'\\''`)}'`;
      return {
        command: "sh",
        args: ["-c", `exec "$0" "$@" >>${quoted}`, command, ...args],
        stdout: "null",
      };
    },
    beforeRead: () => reading,
    async sampled() {
      if (kind === "stall" || on) return "";
      const text = await Deno.readTextFile(log).catch(() => "");
      await Deno.truncate(log, 0).catch(() => {});
      return text;
    },
    async run(started, signal) {
      await sleepUntil(started + window.from * 1000, signal);
      if (signal.aborted) return;
      await start();
      try {
        await sleepUntil(started + window.until * 1000, signal);
      } finally {
        await stop();
      }
    },
  };
}

/** The `q` quantile of `sorted` (ascending), NaN when it is empty. */
export function quantile(sorted: readonly number[], q: number): number {
  return sorted.length === 0
    ? NaN
    : sorted[Math.min(sorted.length - 1, Math.floor(sorted.length * q))];
}

/** One phase of a run, summed up. */
export interface PhaseSummary {
  readonly seconds: number;
  readonly rate: number;
  readonly p50: number;
  readonly p99: number;
  readonly max: number;
  /** `status: count, …`. */
  readonly outcomes: string;
}

/** Outcomes and latencies of the requests that completed in each phase of a run. */
export interface PhaseTally {
  /** Counts one request, in the phase it completed in. */
  record(outcome: string, ms: number): void;
  /** One markdown row per phase; `ended` is when the load stopped (seconds since it began). */
  rows(ended: number): string[];
  /** Requests per second, the 99th percentile (ms) and the outcomes of each phase. */
  summary(ended: number): Record<Phase, PhaseSummary>;
}

/** A {@link PhaseTally} for a run whose load began at `started` (`performance.now()`). */
export function phaseTally(window: EpisodeWindow, started: number): PhaseTally {
  const phases = new Map<Phase, { statuses: Map<string, number>; ms: number[] }>();
  for (const phase of ["before", "during", "after"] as const) {
    phases.set(phase, { statuses: new Map(), ms: [] });
  }
  const span = (phase: Phase, ended: number) =>
    phase === "before"
      ? window.from
      : phase === "during"
      ? window.until - window.from
      : ended - window.until;
  const summary = (ended: number): Record<Phase, PhaseSummary> => {
    const one = (phase: Phase): PhaseSummary => {
      const { statuses, ms } = phases.get(phase)!;
      const sorted = [...ms].sort((a, b) => a - b);
      const at = (q: number) => quantile(sorted, q);
      const seconds = span(phase, ended);
      return {
        seconds,
        rate: ms.length / seconds,
        p50: at(0.5),
        p99: at(0.99),
        max: at(1),
        outcomes: [...statuses].sort().map(([s, n]) => `${s}: ${n}`).join(", "),
      };
    };
    return { before: one("before"), during: one("during"), after: one("after") };
  };
  return {
    record(outcome, ms) {
      const { statuses, ms: times } = phases.get(
        phaseOf(window, (performance.now() - started) / 1000),
      )!;
      statuses.set(outcome, (statuses.get(outcome) ?? 0) + 1);
      times.push(ms);
    },
    summary,
    rows(ended) {
      return Object.entries(summary(ended)).map(([phase, p]) =>
        `| ${phase} | ${p.seconds.toFixed(0)} | ${p.rate.toFixed(1)} | ${p.p50.toFixed(1)} | ` +
        `${p.p99.toFixed(1)} | ${p.max.toFixed(0)} | ${p.outcomes} |`
      );
    },
  };
}
