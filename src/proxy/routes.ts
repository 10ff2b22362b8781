/**
 * A tenant's route table. Path patterns are exact (`/about`), templates with whole-segment
 * parameters (`/users/{id}`), or prefixes (`prefix: /static/`). Lookup tries the most specific
 * first — exact, then templates (more literal segments first), then prefixes (longest first),
 * file order breaking ties — and the first candidate whose methods and host also match wins.
 *
 * @module
 */

/** One template segment: a literal, or a named parameter. */
export type Segment = string | { readonly param: string };

/** How a route's path is matched. */
export type PathPattern =
  | { readonly kind: "exact"; readonly path: string }
  | { readonly kind: "prefix"; readonly prefix: string }
  | { readonly kind: "template"; readonly segments: readonly Segment[] };

/** A route ready to match. */
export interface RouteEntry<A> {
  readonly name: string;
  /** Position in the tenant file's `routes` list. */
  readonly index: number;
  readonly pattern: PathPattern;
  /** Allowed methods; undefined allows every method. */
  readonly methods?: ReadonlySet<string>;
  /** Only requests for this host (one of the tenant's names); undefined allows all. */
  readonly host?: string;
  /** Header, query and cookie conditions, all of which must hold. */
  readonly criteria?: Criteria;
  /** 0–10 (5 when absent); 8 and above may use the public lane's priority reserve. */
  readonly priority?: number;
  /** Set while the route is under maintenance: 503 with this Retry-After. */
  readonly maintenance?: { readonly retryAfterS: number };
  readonly action: A;
}

/** One condition: a name that must be present (`true`) or carry exactly this value. */
export type Condition = readonly [name: string, want: true | string];

/** Header (lower-case names), query and cookie conditions of a route. */
export interface Criteria {
  readonly headers: readonly Condition[];
  readonly query: readonly Condition[];
  readonly cookies: readonly Condition[];
}

/** What criteria are checked against; each lookup is computed on first use. */
export interface RequestFacts {
  /** A header by lower-case name (repeated headers joined with ", "). */
  header(name: string): string | undefined;
  /** A query parameter ("" when present without a value). */
  query(name: string): string | undefined;
  cookie(name: string): string | undefined;
}

const NO_FACTS: RequestFacts = {
  header: () => undefined,
  query: () => undefined,
  cookie: () => undefined,
};

/** A successful lookup. */
export interface RouteMatch<A> {
  readonly route: RouteEntry<A>;
  /** Template parameters, percent-decoded. */
  readonly params: Readonly<Record<string, string>>;
}

const NO_PARAMS: Readonly<Record<string, string>> = Object.freeze({});
const PARAM = /^\{([A-Za-z_][A-Za-z0-9_]*)\}$/;

/**
 * Parses a `match.path` value into an exact or template pattern.
 *
 * @returns the pattern, or a message saying what is wrong with it
 */
export function parsePath(path: string): PathPattern | string {
  if (!path.includes("{") && !path.includes("}")) return { kind: "exact", path };
  const names = new Set<string>();
  const segments: Segment[] = [];
  for (const segment of path.split("/").slice(1)) {
    const param = PARAM.exec(segment);
    if (param) {
      if (names.has(param[1])) return `Parameter "{${param[1]}}" appears twice`;
      names.add(param[1]);
      segments.push({ param: param[1] });
    } else if (segment.includes("{") || segment.includes("}")) {
      return "A parameter must be a whole segment such as /users/{id}";
    } else {
      segments.push(segment);
    }
  }
  return { kind: "template", segments };
}

/** An immutable route table. */
export class RouteTable<A> {
  readonly #exact = new Map<string, RouteEntry<A>[]>();
  readonly #templates: { route: RouteEntry<A>; segments: readonly Segment[] }[];
  readonly #prefixes: { route: RouteEntry<A>; prefix: string }[];

  /** @param routes routes in file order */
  constructor(routes: readonly RouteEntry<A>[]) {
    const templates: { route: RouteEntry<A>; segments: readonly Segment[]; order: number }[] = [];
    const prefixes: { route: RouteEntry<A>; prefix: string; order: number }[] = [];
    routes.forEach((route, order) => {
      const pattern = route.pattern;
      if (pattern.kind === "exact") {
        const list = this.#exact.get(pattern.path) ?? [];
        list.push(route);
        this.#exact.set(pattern.path, list);
      } else if (pattern.kind === "template") {
        templates.push({ route, segments: pattern.segments, order });
      } else {
        prefixes.push({ route, prefix: pattern.prefix, order });
      }
    });
    const literals = (segments: readonly Segment[]) =>
      segments.filter((s) => typeof s === "string").length;
    this.#templates = templates.sort((a, b) =>
      literals(b.segments) - literals(a.segments) || a.order - b.order
    );
    this.#prefixes = prefixes.sort((a, b) =>
      b.prefix.length - a.prefix.length || a.order - b.order
    );
  }

  /**
   * Finds the route for a request.
   *
   * @param method the request method
   * @param path the raw request path
   * @param host the normalised request host
   * @param facts headers, query and cookies, for routes with criteria
   */
  match(
    method: string,
    path: string,
    host: string,
    facts: RequestFacts = NO_FACTS,
  ): RouteMatch<A> | undefined {
    for (const route of this.#exact.get(path) ?? []) {
      if (accepts(route, method, host, facts)) return { route, params: NO_PARAMS };
    }
    if (this.#templates.length > 0) {
      const segments = path.split("/").slice(1);
      for (const template of this.#templates) {
        if (!accepts(template.route, method, host, facts)) continue;
        const params = matchTemplate(template.segments, segments);
        if (params) return { route: template.route, params };
      }
    }
    for (const { route, prefix } of this.#prefixes) {
      if (path.startsWith(prefix) && accepts(route, method, host, facts)) {
        return { route, params: NO_PARAMS };
      }
    }
    return undefined;
  }
}

function accepts<A>(
  route: RouteEntry<A>,
  method: string,
  host: string,
  facts: RequestFacts,
): boolean {
  if (route.methods && !route.methods.has(method)) return false;
  if (route.host && route.host !== host) return false;
  const criteria = route.criteria;
  // Call the lookups as methods: a RequestFacts may be a class instance that needs its `this`.
  return !criteria ||
    (holds(criteria.headers, (name) => facts.header(name)) &&
      holds(criteria.query, (name) => facts.query(name)) &&
      holds(criteria.cookies, (name) => facts.cookie(name)));
}

function holds(
  conditions: readonly Condition[],
  lookup: (name: string) => string | undefined,
): boolean {
  for (const [name, want] of conditions) {
    const got = lookup(name);
    if (got === undefined || (want !== true && got !== want)) return false;
  }
  return true;
}

function matchTemplate(
  pattern: readonly Segment[],
  segments: readonly string[],
): Record<string, string> | undefined {
  if (pattern.length !== segments.length) return undefined;
  const params: Record<string, string> = {};
  for (let i = 0; i < segments.length; i++) {
    const want = pattern[i];
    const got = segments[i];
    if (typeof want === "string") {
      if (want !== got) return undefined;
      continue;
    }
    if (got === "") return undefined;
    try {
      params[want.param] = decodeURIComponent(got);
    } catch {
      return undefined;
    }
  }
  return params;
}
