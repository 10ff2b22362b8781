/**
 * What a soak (soak.ts) measures and prints: the gateway's descriptors and `/metrics`, the machine's
 * load; the samples, the least-squares slopes that say whether memory or descriptors grow, and for
 * a log episode (soak_episodes.ts) how the mix was served around it and what the gateway said
 * about it. Also which of the gateway's output lines are worth keeping.
 *
 * @module
 */
import type { LogEpisode, PhaseTally } from "./soak_episodes.ts";

/** The interval between samples. */
export const SAMPLE_MS = 10_000;
const MB = 1024 * 1024;

/** Megabytes, one decimal. */
export const mb = (bytes: number): string => (bytes / MB).toFixed(1);

/** The access log's counters (stream `stdout`) from `/metrics`, summed over the isolates. */
export interface LogCounts {
  readonly written: number;
  readonly dropped: number;
  readonly episodes: number;
  readonly queued: number;
}

/** One sample of the gateway. */
export interface Sample {
  readonly seconds: number;
  readonly rss: number;
  readonly fds: number;
  readonly requests: number;
  /** The 99th percentile of the requests completed in the interval, ms. */
  readonly p99: number;
  /** Requests the driver skipped in the interval (too many pending: the gateway was slow). */
  readonly skipped: number;
  /** The machine's 1-minute load average. */
  readonly load: number;
  /** V8 heap in use per isolate, bytes. */
  readonly heaps: readonly number[];
  readonly log: LogCounts;
  /** True when the log episode was on at the sample. */
  readonly episode: boolean;
}

/** Open descriptors of `pid`, counted from a listing of /proc/<pid>/fd. */
export async function fdsOf(pid: number): Promise<number> {
  const out = await new Deno.Command("ls", { args: ["-1", `/proc/${pid}/fd`], stdout: "piped" })
    .output();
  return new TextDecoder().decode(out.stdout).split("\n").filter((line) => line !== "").length;
}

/**
 * Scrapes `/metrics` on the local_health lane (as Prometheus would); returns each isolate's V8 heap
 * in use (bytes, isolate 0 first), so growth can be told apart: JS objects kept, or native memory;
 * and the access log's counters (src/observe/metrics_process.ts, `logFamilies`; NaN when absent).
 */
export async function scrape(port: number): Promise<{ heaps: number[]; log: LogCounts }> {
  const response = await fetch(`http://127.0.0.1:${port}/metrics`).catch(() => undefined);
  const text = await response?.text().catch(() => "") ?? "";
  const heaps: number[] = [];
  for (
    const match of text.matchAll(/^portcullis_isolate_heap_used_bytes\{isolate="(\d+)"\} (\S+)$/gm)
  ) {
    heaps[Number(match[1])] = Number(match[2]);
  }
  const value = (series: string) => {
    const line = text.split("\n").find((l) => l.startsWith(`portcullis_${series} `));
    return line === undefined ? NaN : Number(line.slice(line.lastIndexOf(" ") + 1));
  };
  const log = {
    written: value('log_lines_total{stream="stdout",outcome="written"}'),
    dropped: value('log_lines_total{stream="stdout",outcome="dropped"}'),
    episodes: value('log_drop_episodes_total{stream="stdout"}'),
    queued: value('log_queue_bytes{stream="stdout"}'),
  };
  return { heaps, log };
}

/**
 * The machine's 1-minute load average (read with `cat`: Deno wants full access for /proc): the
 * soak shares the machine, this says how much.
 */
export async function loadAverage(): Promise<number> {
  const out = await new Deno.Command("cat", { args: ["/proc/loadavg"], stdout: "piped" }).output();
  return Number(new TextDecoder().decode(out.stdout).split(" ")[0] || NaN);
}

/** The least-squares slope of `y` over `x`. */
export function slope(points: readonly (readonly [x: number, y: number])[]): number {
  const n = points.length;
  if (n < 2) return NaN;
  const mx = points.reduce((s, [x]) => s + x, 0) / n;
  const my = points.reduce((s, [, y]) => s + y, 0) / n;
  let num = 0;
  let den = 0;
  for (const [x, y] of points) {
    num += (x - mx) * (y - my);
    den += (x - mx) ** 2;
  }
  return den === 0 ? NaN : num / den;
}

/**
 * Output lines worth showing after a soak: none of the mix should give a 421 or a 500, and the
 * diagnostic log (JSON lines, src/observe/diag.ts) should say no warning or error.
 */
const NOTABLE = /"status":(421|500)\b|portcullis: (error|warning)|"level":"(warn|error)"/;
/**
 * The diagnostic lines of a log drop episode (`episodeLine` in src/observe/log_outlet.ts): one when
 * a stream begins dropping, one when it is written again. Kept apart from {@link NOTABLE}.
 */
const EPISODE_LINE = /log lines on \w+ (are being dropped|are written again)/;
/**
 * Warnings and errors the mix causes on purpose, counted rather than shown: the refusing backend
 * (`/dead`: 502s, its breaker going cold and back) and the rate-limited tenant (429s).
 */
const EXPECTED =
  /upstream_unreachable after|policy rate_limit: request \S+ refused|egress: backend \S+ \w+ -> \w+/;
/** At most this many notable lines, and this many episode lines, are kept. */
export const NOTABLE_CAP = 20;

/** What a soak keeps of the gateway's output once it is ready. */
export interface Kept {
  readonly notable: string[];
  readonly episodes: string[];
  /** Episode lines seen, kept or not. */
  episodeLines: number;
  /** Warnings and errors the mix causes on purpose ({@link EXPECTED}), seen. */
  expected: number;
}

/** An empty {@link Kept}. */
export const kept = (): Kept => ({ notable: [], episodes: [], episodeLines: 0, expected: 0 });

/** Keeps `line` in `kept` when it is an episode line or a notable one. */
export function keep(line: string, kept: Kept): void {
  if (EPISODE_LINE.test(line)) {
    kept.episodeLines++;
    if (kept.episodes.length < NOTABLE_CAP) kept.episodes.push(line);
  } else if (EXPECTED.test(line)) {
    kept.expected++;
  } else if (kept.notable.length < NOTABLE_CAP && NOTABLE.test(line)) {
    kept.notable.push(line);
  }
}

/** Prints the samples as a markdown table. */
export function printSamples(samples: readonly Sample[], withEpisode: boolean): void {
  console.log(
    "| t (s) | RSS (MB) | descriptors | req/s in the interval | p99 (ms) | skipped | load " +
      "| V8 heap in use per isolate (MB) | access log lines written | dropped | drop episodes " +
      "| queued (KiB) | episode |",
  );
  console.log("|---|---|---|---|---|---|---|---|---|---|---|---|---|");
  samples.forEach((s, i) => {
    const rate = (s.requests - (samples[i - 1]?.requests ?? 0)) / (SAMPLE_MS / 1000);
    const heaps = s.heaps.map(mb).join(" / ");
    const { written, dropped, episodes, queued } = s.log;
    const on = !withEpisode ? "–" : s.episode ? "on" : "";
    console.log(
      `| ${s.seconds} | ${mb(s.rss)} | ${s.fds} | ${rate.toFixed(0)} | ${s.p99.toFixed(0)} | ` +
        `${s.skipped} | ${s.load.toFixed(1)} | ${heaps} | ${written} | ` +
        `${dropped} | ${episodes} | ${(queued / 1024).toFixed(0)} | ${on} |`,
    );
  });
}

/** What {@link reportEpisode} reports on. */
export interface EpisodeRun {
  readonly episode: LogEpisode;
  readonly tally: PhaseTally;
  /** When the load stopped, seconds after it began. */
  readonly ended: number;
  readonly samples: readonly Sample[];
  readonly kept: Kept;
}

/**
 * Prints how the mix was served before, during and after the episode, what the access log lost,
 * memory and descriptors around it, and the episode lines on stderr; returns its summary row.
 */
export function reportEpisode(name: string, run: EpisodeRun): string {
  const { episode, tally, ended, samples, kept } = run;
  const { from, until } = episode.window;
  console.log(`\n#### Log episode \`${episode.kind}\` from ${from} s to ${until} s\n`);
  console.log("| phase | seconds | req/s | p50 (ms) | p99 (ms) | max (ms) | outcomes |");
  console.log("|---|---|---|---|---|---|---|");
  for (const row of tally.rows(ended)) console.log(row);
  const last = samples.at(-1)!;
  const before = samples.filter((s) => s.seconds <= from).at(-1) ?? samples[0];
  const during = samples.filter((s) => s.seconds > from && s.seconds <= until + SAMPLE_MS / 1000);
  const highest = (pick: (s: Sample) => number) => Math.max(...during.map(pick));
  const rss = `${mb(before.rss)} → ${mb(highest((s) => s.rss))} → ${mb(last.rss)}`;
  const fds = `${before.fds} → ${highest((s) => s.fds)} → ${last.fds}`;
  const { written, dropped, episodes } = last.log;
  console.log(
    `\naccess log (stdout, /metrics at the last sample): ${written} lines written, ${dropped} ` +
      `dropped, ${episodes} drop episodes${episode.notes.map((n) => `; ${n}`).join("")}`,
  );
  console.log(`RSS (MB) before → highest during → last: ${rss}; descriptors ${fds}`);
  console.log(
    `\nepisode lines the gateway wrote on stderr (${kept.episodeLines} in all, first ` +
      `${NOTABLE_CAP}):\n${kept.episodes.join("\n")}`,
  );
  const phases = tally.summary(ended);
  const rates = [phases.before, phases.during, phases.after].map((p) => p.rate.toFixed(1));
  const p99 = [phases.before, phases.during, phases.after].map((p) => p.p99.toFixed(1));
  return `| ${name} | ${episode.kind} | ${rates.join(" / ")} | ${p99.join(" / ")} | ` +
    `${phases.during.outcomes} | ${dropped} | ${episodes} | ${kept.episodeLines} | ${rss} | ${fds} |`;
}

/** Slopes per minute: all samples, the second half, the troughs (lowest RSS of each minute). */
export function summarize(name: string, idle: number, samples: readonly Sample[]): string {
  const minutes = (s: Sample) => s.seconds / 60;
  const rss = (list: readonly Sample[]) => slope(list.map((s) => [minutes(s), s.rss / MB]));
  const late = samples.slice(Math.floor(samples.length / 2));
  const troughs: Sample[] = [];
  const perMinute = 60_000 / SAMPLE_MS;
  for (let i = 0; i + perMinute <= samples.length; i += perMinute) {
    const window = samples.slice(i, i + perMinute);
    troughs.push(window.reduce((low, s) => s.rss < low.rss ? s : low));
  }
  const fds = slope(samples.map((s) => [minutes(s), s.fds]));
  // The heaps' second half: a V8 heap still sizing itself grows early, a leak grows throughout.
  const heap = slope(late.map((s) => [minutes(s), s.heaps.reduce((a, b) => a + b, 0) / MB]));
  const fixed = (n: number) => Number.isNaN(n) ? "–" : n.toFixed(2);
  const first = samples[0];
  const last = samples.at(-1)!;
  return `| ${name} | ${mb(idle)} | ${mb(first.rss)} | ${mb(last.rss)} | ${
    fixed(rss(samples))
  } | ` +
    `${fixed(rss(late))} | ${fixed(rss(troughs))} | ${
      fixed(heap)
    } | ${first.fds} → ${last.fds} | ` +
    `${fixed(fds)} |`;
}

/** Prints the summary table, and the episodes' when there was one. */
export function printSummary(
  heading: string,
  rows: readonly { row: string; episodeRow?: string }[],
): void {
  console.log(`\n### ${heading}\n`);
  console.log(
    "| configuration | idle RSS (MB) | first sample (MB) | last sample (MB) | RSS slope (MB/min) " +
      "| second half (MB/min) | troughs (MB/min) | V8 heaps, second half (MB/min) | descriptors " +
      "| descriptor slope (/min) |",
  );
  console.log("|---|---|---|---|---|---|---|---|---|---|");
  for (const { row } of rows) console.log(row);
  const episodes = rows.flatMap(({ episodeRow }) => episodeRow ?? []);
  if (episodes.length === 0) return;
  console.log(`\n### Log episode summary\n`);
  console.log(
    "| configuration | episode | req/s before / during / after | p99 ms before / during / after " +
      "| outcomes during | access log lines dropped | drop episodes | episode lines on stderr " +
      "| RSS MB before → highest during → last | descriptors before → highest during → last |",
  );
  console.log("|---|---|---|---|---|---|---|---|---|---|");
  for (const row of episodes) console.log(row);
}
