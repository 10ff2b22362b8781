/**
 * The standard `process_*` series, named as every Prometheus client library names them so that
 * dashboards and alerts made for any process work on the gateway: resident memory, CPU time, the
 * start time, and the open-file limit when it is known exactly.
 *
 * Client libraries read these from `/proc/self`. Deno 2.9.6 refuses `/proc/self/*` (and
 * `/dev/fd`) to anything short of `--allow-all`, whatever `--allow-read` grants — so a narrow read
 * grant in `main.ts flags` cannot help, and the gateway's scoped flags stay as they are. What is
 * read instead needs no permission: `Deno.memoryUsage().rss` and `process.cpuUsage()` (from
 * `getrusage`, every thread of the process), and the main isolate's time origin for the start.
 * The limit comes from the boot probe (`src/server/descriptors.ts`). Two series the libraries
 * also export have no such source and are left out: `process_open_fds` and
 * `process_virtual_memory_bytes`; `portcullis_descriptors_exhausted` and
 * `portcullis_lane_connections` stand for the first.
 *
 * @module
 */
import process from "node:process";
import { counter, type Family, gauge, only, standard } from "./exposition.ts";

/** What the process uses, read at one instant. */
export interface ProcessFacts {
  /** Resident set size, bytes. */
  readonly residentBytes: number;
  /** User and system CPU time of every thread, seconds. */
  readonly cpuSeconds: number;
  /** When the process started, Unix time in seconds (the same value every reading). */
  readonly startTimeSeconds: number;
}

/**
 * Reads the process's memory and CPU time now, and its start time.
 *
 * Call it in the main isolate (worker 0, which serves `/metrics`): a `Worker`'s time origin is its
 * own start, not the process's. Memory and CPU time are the whole process's from any isolate.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { readProcessFacts } from "./process_stats.ts";
 *
 * const facts = readProcessFacts();
 * assert.ok(facts.residentBytes > 0 && facts.cpuSeconds > 0);
 * assert.equal(readProcessFacts().startTimeSeconds, facts.startTimeSeconds);
 * ```
 */
export function readProcessFacts(): ProcessFacts {
  const cpu = process.cpuUsage();
  return {
    residentBytes: Deno.memoryUsage().rss,
    cpuSeconds: (cpu.user + cpu.system) / 1e6,
    startTimeSeconds: Math.floor(performance.timeOrigin) / 1000,
  };
}

/**
 * The `process_*` families.
 *
 * @param facts a reading from {@link readProcessFacts}
 * @param maxFds the open-file limit, when measured exactly (left out otherwise)
 */
export function processFamilies(facts: ProcessFacts, maxFds: number | undefined): Family[] {
  const families = [
    gauge(
      "process_resident_memory_bytes",
      "Memory the process holds in RAM (RSS).",
      only(facts.residentBytes),
    ),
    counter(
      "process_cpu_seconds_total",
      "CPU time the process used, user and system, every thread.",
      only(facts.cpuSeconds),
    ),
    gauge(
      "process_start_time_seconds",
      "When the process started, Unix time.",
      only(facts.startTimeSeconds),
    ),
    ...(maxFds === undefined
      ? []
      : [gauge("process_max_fds", "The open-file limit (RLIMIT_NOFILE).", only(maxFds))]),
  ];
  return families.map(standard);
}
