/**
 * The Prometheus text format (version 0.0.4) as the metrics page writes it: a family is data — a
 * name, a type, a help line and its samples in order — and {@link expose} turns a list of them into
 * the page. The builders below make the samples every family shares a shape for (one unlabelled
 * value, one per label value, one per lane, one per lane and key, a lane-labelled histogram).
 *
 * Kept apart from `metrics.ts` so that file reads as the list of families and what each counts,
 * and the format's rules (`portcullis_` prefix, HELP before TYPE, cumulative buckets ending in
 * `+Inf`, label escaping) sit in one place. The names follow Prometheus's conventions, which
 * `promtool check metrics` enforces (tests/metrics_tools_test.ts runs it): base units (`_seconds`,
 * `_bytes`, `_ratio`), `_total` on counters alone, and no label called `instance` or `job` — a
 * scrape sets those itself and renames the target's own to `exported_instance`. Written by hand rather than with a client library:
 * the page is rendered from snapshots on request, with no registry or collectors to keep in step,
 * and its text is compared byte for byte.
 *
 * @module
 */
import { LANE_NAMES, type LaneName } from "../ledger/lane_names.ts";

/** A sample line after the family's name: an optional suffix (`_bucket`), the labels, the value. */
export type Sample = readonly [rest: string, value: number];

/** One metric family: its name after `portcullis_`, its type and help, and its samples in order. */
export interface Family {
  readonly name: string;
  readonly type: "counter" | "gauge" | "histogram";
  readonly help: string;
  readonly samples: readonly Sample[];
  /**
   * True for a name every Prometheus client exports the same way (`process_cpu_seconds_total`):
   * written as is, without the `portcullis_` prefix, so dashboards made for any process work.
   */
  readonly standard?: boolean;
}

/**
 * The exposition text of `families`: per family a HELP and a TYPE line, then its samples.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { counter, expose, only } from "./exposition.ts";
 *
 * assert.equal(
 *   expose([counter("retries_total", "Retries sent.", only(3))]),
 *   "# HELP portcullis_retries_total Retries sent.\n" +
 *     "# TYPE portcullis_retries_total counter\n" +
 *     "portcullis_retries_total 3\n",
 * );
 * ```
 */
export function expose(families: readonly Family[]): string {
  const lines: string[] = [];
  for (const { name, type, help, samples, standard } of families) {
    const metric = standard ? name : `portcullis_${name}`;
    lines.push(`# HELP ${metric} ${help}`, `# TYPE ${metric} ${type}`);
    for (const [rest, value] of samples) lines.push(`${metric}${rest} ${value}`);
  }
  return lines.join("\n") + "\n";
}

/** A counter family. */
export function counter(name: string, help: string, samples: readonly Sample[]): Family {
  return { name, type: "counter", help, samples };
}

/** A gauge family. */
export function gauge(name: string, help: string, samples: readonly Sample[]): Family {
  return { name, type: "gauge", help, samples };
}

/** A family under its standard name, without the `portcullis_` prefix (`process_…`). */
export function standard(family: Family): Family {
  return { ...family, standard: true };
}

/** A histogram family (its samples from {@link byLaneHistogram}). */
export function histogram(name: string, help: string, samples: readonly Sample[]): Family {
  return { name, type: "histogram", help, samples };
}

/** A single unlabelled sample. */
export function only(value: number): Sample[] {
  return [["", value]];
}

/** One sample per pair, labelled `label="key"` (keys come from config or code, not escaped). */
export function byLabel(
  label: string,
  pairs: readonly (readonly [string | number, number])[],
): Sample[] {
  return pairs.map(([key, value]) => [`{${label}="${key}"}`, value]);
}

/** One sample per lane. */
export function byLane(pick: (lane: LaneName) => number): Sample[] {
  return byLabel("lane", LANE_NAMES.map((lane) => [lane, pick(lane)]));
}

/** One sample per lane and key, labelled `lane` and `label`. */
export function byLaneAnd<K extends string>(
  label: string,
  keys: readonly K[],
  pick: (lane: LaneName, key: K) => number,
): Sample[] {
  return LANE_NAMES.flatMap((lane) =>
    keys.map((key): Sample => [`{lane="${lane}",${label}="${key}"}`, pick(lane, key)])
  );
}

/**
 * A lane-labelled histogram's samples: per lane the cumulative buckets, `+Inf`, the sum and the
 * count.
 *
 * @param bounds the buckets' upper bounds, ascending
 * @param pick a lane's counts: one per bound, then the overflow past the last, then the sum
 */
export function byLaneHistogram(
  bounds: readonly number[],
  pick: (lane: LaneName) => readonly number[],
): Sample[] {
  const samples: Sample[] = [];
  for (const lane of LANE_NAMES) {
    const counts = pick(lane);
    let cumulative = 0;
    bounds.forEach((bound, i) => {
      cumulative += counts[i];
      samples.push([`_bucket{lane="${lane}",le="${bound}"}`, cumulative]);
    });
    cumulative += counts[bounds.length];
    samples.push([`_bucket{lane="${lane}",le="+Inf"}`, cumulative]);
    samples.push([`_sum{lane="${lane}"}`, counts[bounds.length + 1]]);
    samples.push([`_count{lane="${lane}"}`, cumulative]);
  }
  return samples;
}

/** A label value with `\\`, `"` and newlines escaped (Prometheus text format). */
export function escapeLabel(value: string): string {
  return value.replaceAll("\\", "\\\\").replaceAll('"', '\\"').replaceAll("\n", "\\n");
}
