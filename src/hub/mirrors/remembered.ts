/**
 * The hub's memory of its probe results (issue 34): after a restart every mirror's verdict used to
 * be `unknown` until the first round ended — minutes with check-host.net — and a door that gets a
 * view where no mirror was ever checked sends readers to any mirror (`src/door/choose.ts`), the
 * blocked ones included. Each mirror's last result (when it was taken, and each region's word) is
 * kept in `<doors.state_dir>/probe-results.json`, written whole after every result and round
 * (`src/live/durable_write.ts`: flushed, renamed, folder flushed), read back once at boot before
 * the first view is published.
 *
 * **Verified on read.** The file must be JSON of this format, name this hub's node id (a file
 * copied from another hub, or left by another `doors:` setup, is foreign), carry a SHA-256 of its
 * canonical JSON that matches (a file damaged on disk or edited by hand is refused), and hold only
 * well-formed records dated no later than now (a result from the future would never age). A file
 * that fails any check is refused whole, with one error line naming the file and the reason, and
 * every mirror starts `unknown` — the hub serves on either way. A checksum, not a MAC: a key would
 * sit in the same folder under the same user, so it proves nothing a digest does not against
 * anyone who can write there, and a forged file lasts only until the prober's first round (which
 * starts at boot) or the stale horizon below, whichever comes first.
 *
 * **Old results.** A remembered result keeps the time it was taken; the verdict rule does not
 * change (`verdict.ts`: older than 3 intervals → `unknown`). A result already that old at boot is
 * dropped rather than loaded, as are results of mirrors no longer in the registry and answers of
 * regions no longer probed from: a hub back after a long absence starts as a new one would, and a
 * door then treats the mirrors as never checked. Without an enabled prober nothing is read or
 * written (there are no results).
 *
 * @module
 */
import * as v from "valibot";
import { createHash } from "node:crypto";
import { join } from "node:path";
import { HostName } from "../../config/tenant_schema.ts";
import { describeIoError } from "../../config/yaml_file.ts";
import { writeDurably } from "../../live/durable_write.ts";
import { canonicalJson } from "../../live/view_hash.ts";
import { describeError } from "../../request/errors.ts";
import { ProbeRegion } from "./schema.ts";
import { type ProbeResult, type RegionAnswer, STALE_INTERVALS } from "./verdict.ts";

/** The file's name in `doors.state_dir`. */
export const RESULTS_FILE = "probe-results.json";
/** The format the file declares; another value is refused. */
export const RESULTS_FORMAT = "mirror-probe-results/1";
/** How far a result's time may be ahead of the clock (a clock stepped back a little). */
const FUTURE_SLACK_MS = 60_000;

const RecordSchema = v.strictObject({
  host: HostName,
  at: v.pipe(v.string(), v.isoTimestamp()),
  regions: v.record(ProbeRegion, v.picklist(["ok", "failed"])),
});

const FileSchema = v.strictObject({
  format: v.literal(RESULTS_FORMAT),
  hub: v.string(),
  written_at: v.pipe(v.string(), v.isoTimestamp()),
  results: v.array(RecordSchema),
  sha256: v.pipe(v.string(), v.regex(/^[0-9a-f]{64}$/)),
});

/** What the prober's results must fit to be loaded. */
export interface LoadContext {
  /** Epoch ms now. */
  readonly now: number;
  readonly intervalMs: number;
  /** The regions probed from now. */
  readonly regions: readonly string[];
  /** The mirrors in the registry now. */
  readonly hosts: ReadonlySet<string>;
}

/** What the file held, as status shows it. */
export type Recall =
  | { readonly state: "none" }
  | { readonly state: "loaded"; readonly loaded: number; readonly dropped: number }
  | { readonly state: "refused"; readonly reason: string };

/** The SHA-256 the file carries: over the canonical JSON of everything else in it. */
function digestOf(body: Record<string, unknown>): string {
  return createHash("sha256").update(canonicalJson(body)).digest("hex");
}

/**
 * The text of the file for `results` (hosts sorted, regions sorted by canonical JSON).
 *
 * @param hub the node id of the hub writing it
 */
export function encodeResults(
  hub: string,
  results: ReadonlyMap<string, ProbeResult>,
  now: number,
): string {
  const records = [...results.entries()].sort(([a], [b]) => a < b ? -1 : a > b ? 1 : 0).map(
    ([host, result]) => ({
      host,
      at: new Date(result.at).toISOString(),
      regions: Object.fromEntries(result.regions),
    }),
  );
  const body = {
    format: RESULTS_FORMAT,
    hub,
    written_at: new Date(now).toISOString(),
    results: records,
  };
  return JSON.stringify({ ...body, sha256: digestOf(body) }, null, 1) + "\n";
}

/**
 * Checks the file's text and returns the results that fit `context` (see the module doc).
 *
 * @throws {Error} saying why the file is refused (not JSON, another format, foreign, damaged)
 */
export function decodeResults(
  text: string,
  hub: string,
  context: LoadContext,
): { results: Map<string, ProbeResult>; dropped: number } {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    throw new Error(`not JSON (${text.length} bytes)`);
  }
  const parsed = v.safeParse(FileSchema, value);
  if (!parsed.success) {
    const issue = parsed.issues[0];
    const where = v.getDotPath(issue) ?? "(top)";
    throw new Error(`not a probe results file of format ${RESULTS_FORMAT} (at ${where})`);
  }
  const { sha256, ...body } = parsed.output;
  if (digestOf(body) !== sha256) throw new Error("its SHA-256 does not match its contents");
  if (body.hub !== hub) throw new Error(`written by hub "${body.hub}", not by this hub "${hub}"`);
  const results = new Map<string, ProbeResult>();
  let dropped = 0;
  const regions = new Set(context.regions);
  for (const record of body.results) {
    const at = Date.parse(record.at);
    if (at > context.now + FUTURE_SLACK_MS) {
      throw new Error(`the result of ${record.host} is dated ${record.at}, after now`);
    }
    if (results.has(record.host)) throw new Error(`${record.host} is listed twice`);
    const answers = Object.entries(record.regions).filter(([region]) => regions.has(region));
    const stale = context.now - at > STALE_INTERVALS * context.intervalMs;
    if (stale || answers.length === 0 || !context.hosts.has(record.host)) {
      dropped++;
      continue;
    }
    results.set(record.host, { at, regions: new Map(answers as [string, RegionAnswer][]) });
  }
  return { results, dropped };
}

/** What the memory needs. */
export interface RememberedOptions {
  /** `doors.state_dir`. */
  readonly dir: string;
  /** This hub's node id, written in the file and required of it. */
  readonly hub: string;
  readonly log: (line: string) => void;
  readonly now: () => number;
}

/** The probe results file of one hub: read once at boot, written after each change. */
export class RememberedResults {
  readonly #options: RememberedOptions;
  #recall: Recall = { state: "none" };
  #writing: Promise<void> | undefined;
  #pending: ReadonlyMap<string, ProbeResult> | undefined;
  #writeError: { at: string; message: string } | undefined;
  #written = 0;

  /** @param options the folder, the hub's node id, the log and the clock */
  constructor(options: RememberedOptions) {
    this.#options = options;
  }

  /** The file's path. */
  get file(): string {
    return join(this.#options.dir, RESULTS_FILE);
  }

  /**
   * Reads the file: the results to start from, or none when it is missing or refused (logged as
   * an error naming the file). Never throws.
   */
  async load(context: LoadContext): Promise<Map<string, ProbeResult>> {
    const { hub, log } = this.#options;
    let text: string;
    try {
      text = await Deno.readTextFile(this.file);
    } catch (error) {
      if (error instanceof Deno.errors.NotFound) return new Map();
      return this.#refuse(`cannot be read: ${describeIoError(error)}`);
    }
    let decoded: ReturnType<typeof decodeResults>;
    try {
      decoded = decodeResults(text, hub, context);
    } catch (error) {
      return this.#refuse(error instanceof Error ? error.message : String(error));
    }
    const { results, dropped } = decoded;
    this.#recall = { state: "loaded", loaded: results.size, dropped };
    log(
      `portcullis: hub doors: remembered probe results of ${results.size} mirrors loaded from ` +
        `${this.file}` + (dropped > 0 ? ` (${dropped} stale or no longer probed, dropped)` : ""),
    );
    return results;
  }

  /** Writes `results` soon; writes run one at a time and only the newest waiting one is kept. */
  save(results: ReadonlyMap<string, ProbeResult>): Promise<void> {
    this.#pending = new Map(results);
    this.#writing ??= this.#drain().finally(() => this.#writing = undefined);
    return this.#writing;
  }

  /** The memory's state for status. */
  status(): Record<string, unknown> {
    return {
      file: this.file,
      at_boot: this.#recall,
      writes: this.#written,
      last_write_error: this.#writeError ?? null,
    };
  }

  #refuse(reason: string): Map<string, ProbeResult> {
    this.#recall = { state: "refused", reason };
    this.#options.log(
      `portcullis: error: hub doors: remembered probe results ${this.file} refused: ${reason}; ` +
        "every mirror is unknown until the prober checks it (the file is replaced after the " +
        "first result)",
    );
    return new Map();
  }

  async #drain(): Promise<void> {
    const { dir, hub, log, now } = this.#options;
    while (this.#pending) {
      const results = this.#pending;
      this.#pending = undefined;
      try {
        await writeDurably(dir, RESULTS_FILE, encodeResults(hub, results, now()));
        this.#written++;
        if (this.#writeError) log(`portcullis: hub doors: ${this.file} written again`);
        this.#writeError = undefined;
      } catch (error) {
        const message = describeError(error);
        if (!this.#writeError) {
          log(
            `portcullis: error: hub doors: cannot remember probe results in ${this.file}: ` +
              `${message}; verdicts will not survive a restart`,
          );
        }
        this.#writeError = { at: new Date(now()).toISOString(), message };
      }
    }
  }
}
