/**
 * The hub config's `doors:` fragment and the two kinds of file it names: one `<host>.yaml` per
 * public mirror in `mirrors_dir`, and the slugs file. Unknown keys are errors, as in every
 * Portcullis file, so a typo in a slug's `exclude_regions` never silently sends a reader to a
 * mirror hosted where it is blocked.
 *
 * Regions are written two ways on purpose: a mirror's `region` (and a slug's `exclude_regions`) is
 * the ISO 3166-1 alpha-2 code of the country it is hosted in, in capitals (`DE`); the prober's
 * `regions` are check-host.net node names (`de1`, or `de1.node.check-host.net`), the vantage
 * points a mirror is checked from. The two answer different questions — where a mirror lives, and
 * who can reach it — and mixing them up is caught by their shapes.
 *
 * @module
 */
import * as v from "valibot";
import { RuntimeWatch } from "../../config/bootstrap.ts";
import { Text, wholeNumber } from "../../config/fields.ts";
import { HostName } from "../../config/tenant_schema.ts";

const NodeId = v.pipe(
  v.string("Expected text"),
  v.regex(/^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$/, "Expected 1-63 letters, digits, '.', '_' or '-'"),
);

/** Where a mirror is hosted: an ISO 3166-1 alpha-2 country code in capitals. */
export const Region = v.pipe(
  v.string("Expected a region code"),
  v.regex(/^[A-Z]{2}$/, "Expected an ISO 3166-1 alpha-2 code in capitals, such as DE"),
);

/** A check-host.net node a mirror is checked from: `de1` or `de1.node.check-host.net`. */
export const ProbeRegion = v.pipe(
  v.string("Expected a check-host.net node name"),
  v.regex(
    /^[a-z0-9][a-z0-9.-]{0,62}$/,
    "Expected a check-host.net node name such as de1 or de1.node.check-host.net",
  ),
);

/** How a slug picks among its eligible mirrors. */
export const STRATEGIES = ["first", "random", "least_recent"] as const;

/** The mirror prober: off by default (it is the hub's only call to a third party). */
const Prober = v.pipe(
  v.strictObject({
    enabled: v.optional(v.boolean("Expected true or false"), false),
    /** The service that checks mirrors from outside (tests inject their own client). */
    client: v.optional(v.picklist(["check_host"], 'Expected "check_host"'), "check_host"),
    /** Time between the starts of two probe rounds. */
    interval_ms: v.optional(wholeNumber(1000, 86_400_000), 900_000),
    /** check-host.net nodes each mirror is checked from. */
    regions: v.optional(v.array(ProbeRegion, "Expected a list of check-host.net node names"), []),
    /** Longest one mirror's check may take, request and result polls together. */
    timeout_ms: v.optional(wholeNumber(1000, 600_000), 60_000),
  }),
  v.check(
    (prober) => !prober.enabled || prober.regions.length > 0,
    "An enabled prober needs at least one region to check from",
  ),
  v.check(
    (prober) => !prober.enabled || prober.interval_ms >= 60_000,
    "check-host.net is a shared free service: probe at most once a minute (interval_ms 60000 or more)",
  ),
);

/** The hub config's optional `doors:` key: the mirror registry served to door nodes. */
export const DoorsSchema = v.strictObject({
  /** A folder of `<host>.yaml` files, one per public mirror. */
  mirrors_dir: Text,
  /** The slugs doors answer, each with its strategy and the mirrors it may send readers to. */
  slugs_file: Text,
  /**
   * Nodes that are doors. A list only narrows: a listed node never gets the tenant stream, the
   * pool, the relay or the tunnel, and with the fleet CA only a node registered as a door *and*
   * listed follows the door stream (default: every node the CA registered as a door). With token
   * nodes (no CA) this list is the only way the hub knows a door.
   */
  nodes: v.optional(v.array(NodeId, "Expected a list of node ids")),
  /** Reload the mirrors folder and the slugs file when they change. */
  reload: RuntimeWatch,
  /**
   * The folder where the hub keeps its probe results across restarts (`probe-results.json`,
   * hub/mirrors/remembered.ts), written only by the hub and only with an enabled prober.
   */
  state_dir: v.optional(Text, "doors-state"),
  prober: v.optional(Prober, {}),
  /** Door views kept to answer with a delta (an older `have` gets a snapshot). */
  history: v.optional(wholeNumber(1, 1000), 16),
});

/** One mirror's file, `<mirrors_dir>/<host>.yaml`. */
export const MirrorFileSchema = v.strictObject({
  host: HostName,
  region: v.optional(Region),
  /** A disabled mirror stays in the registry but is never offered to doors. */
  enabled: v.optional(v.boolean("Expected true or false"), true),
});

/** A slug: what a door matches against the first path segment. */
const Slug = v.pipe(
  v.string("Expected a slug"),
  v.regex(/^[A-Za-z0-9_-]{8,64}$/, "Expected 8-64 letters, digits, '_' or '-'"),
);

/** The slugs file. */
export const SlugsFileSchema = v.strictObject({
  slugs: v.array(
    v.strictObject({
      slug: Slug,
      strategy: v.picklist(STRATEGIES, 'Expected "first", "random" or "least_recent"'),
      /** The mirrors this slug may send to, in preference order (default: every mirror). */
      mirrors: v.optional(
        v.pipe(
          v.array(HostName, "Expected a list of mirror host names"),
          v.minLength(1, "Expected at least one mirror (leave mirrors out for every mirror)"),
        ),
      ),
      /** Mirrors hosted in these countries are never chosen for this slug. */
      exclude_regions: v.optional(v.array(Region, "Expected a list of region codes"), []),
    }),
    "Expected a list of slugs",
  ),
});

/** The `doors:` fragment as validated (defaults applied, paths as written). */
export type DoorsInput = v.InferOutput<typeof DoorsSchema>;
/** One mirror file as validated. */
export type MirrorFile = v.InferOutput<typeof MirrorFileSchema>;
/** The slugs file as validated. */
export type SlugsFile = v.InferOutput<typeof SlugsFileSchema>;
/** A slug's strategy. */
export type Strategy = typeof STRATEGIES[number];
