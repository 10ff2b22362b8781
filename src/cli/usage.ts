/**
 * The command line's words: the verbs, what each takes, the usage `help` prints (all of it, or
 * one verb's for `portcullis help <verb>` and `portcullis <verb> --help`), the exit statuses, and
 * how a word that is no verb is told apart from a config file.
 *
 * @module
 */
import { closest } from "../config/suggest.ts";
import { FLEET_USAGE } from "./fleet.ts";

/** A verb of the command line. */
export type Verb = "serve" | "check" | "flags" | "hub" | "torpool" | "probe" | "help";

/** Each verb's usage lines and what it does. */
const VERBS: Readonly<Record<Verb, { readonly usage: string; readonly says: string }>> = {
  serve: {
    usage: "portcullis [serve] <config.yaml | door.yaml>",
    says: "Runs an edge (or a door). `serve` may be left out: `portcullis config.yaml`.\n" +
      "Diagnostics go to stderr as JSON lines (time, level, msg); the access log to stdout.",
  },
  check: {
    usage: "portcullis check <config.yaml | hub.yaml | pool.yaml | door.yaml | runtime folder>",
    says: "Validates a config and every file it names (certificates and keys, tokens, the\n" +
      "salt, the tenants and their body files) and prints a summary; warnings are printed\n" +
      "with it. Exit 1 with one line per problem (file:line:col: field: message).",
  },
  flags: {
    usage: "portcullis flags <config.yaml | hub.yaml | pool.yaml | door.yaml>",
    says: "Prints the Deno permission flags the config needs, on one line. A config that fails\n" +
      "`check` prints nothing on stdout, its problems on stderr, and exits 1.",
  },
  hub: {
    usage: `portcullis hub <hub.yaml>\n${FLEET_USAGE}`,
    says: "Runs a hub (serves a runtime folder to remote edges), or makes the fleet CA, a\n" +
      "node's one-time registration secret (or token), or revokes a node.",
  },
  torpool: {
    usage: "portcullis torpool <pool.yaml>",
    says: "Runs a Tor pool supervisor (its JSON API on a Unix socket).",
  },
  probe: {
    usage: "portcullis probe <http(s)://host:port/path>",
    says: "GETs the URL once (3 s timeout) and exits 0 on a 2xx answer, 1 otherwise: a\n" +
      "container HEALTHCHECK without a shell or curl. Meant for the gateway's own loopback\n" +
      "listeners (e.g. http://127.0.0.1:9901/readyz); https is not verified on loopback.",
  },
  help: {
    usage: "portcullis help [verb]",
    says: "Prints this usage, or one verb's.",
  },
};

/** The verbs, in the order the usage lists them. */
export const VERB_NAMES: readonly Verb[] = Object.keys(VERBS) as Verb[];

/** The exit statuses, as the usage and the README state them. */
export const EXIT_STATUSES = `exit status:
  0  done (probe: a 2xx answer)
  1  refused: a config that fails check, the permission audit, a bind failure, a revoked
     node at start (probe: no 2xx answer)
  2  usage: an unknown verb or option, a missing or extra argument
  3  stopped because the hub revoked this node (a supervisor should not restart it)`;

/** True for a word that is a verb. */
export function isVerb(word: string | undefined): word is Verb {
  return word !== undefined && Object.hasOwn(VERBS, word);
}

/**
 * The whole usage: every verb's lines (each once), then `--version`, `--help` and the exit
 * statuses.
 */
export function usage(): string {
  const lines = VERB_NAMES.flatMap((verb) => VERBS[verb].usage.split("\n"));
  return [
    "usage:",
    ...lines.map((line) => `  ${line.trimStart()}`),
    "  portcullis --version",
    "",
    "portcullis <verb> --help (or portcullis help <verb>) says more about one verb.",
    "",
    EXIT_STATUSES,
  ].join("\n");
}

/** One verb's usage lines, as a usage error shows them. */
export function usageLines(verb: Verb): string {
  const lines = VERBS[verb].usage.split("\n").map((line) => `  ${line.trimStart()}`);
  return ["usage:", ...lines].join("\n");
}

/** One verb's usage, what it does, and the exit statuses (`portcullis <verb> --help`). */
export function verbUsage(verb: Verb): string {
  return [usageLines(verb), "", VERBS[verb].says, "", EXIT_STATUSES].join("\n");
}

/** True when the arguments ask for help: `--help` or `-h` anywhere. */
export function asksForHelp(args: readonly string[]): boolean {
  return args.some((arg) => arg === "--help" || arg === "-h");
}

/**
 * Why a first word that is not a verb is not a config file either, or undefined when it may be
 * one (`serve` is the default verb). A word is taken for a mistyped verb when no such file exists
 * and it looks like no path (no `.` or `/`), or when arguments follow it (serve takes one).
 *
 * @param word the first argument
 * @param rest the arguments after it
 * @param exists whether a file or folder of that name exists
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { unknownVerb } from "./usage.ts";
 * assert.equal(unknownVerb("chek", ["x"], false), "unknown verb chek; did you mean check?");
 * assert.equal(unknownVerb("config.yaml", [], false), undefined);
 * ```
 */
export function unknownVerb(
  word: string,
  rest: readonly string[],
  exists: boolean,
): string | undefined {
  if (exists && rest.length === 0) return undefined;
  if (rest.length === 0 && /[./]/.test(word)) return undefined;
  if (word.startsWith("-")) return `unknown option ${word}`;
  const guess = closest(word, VERB_NAMES);
  return `unknown verb ${word}` + (guess ? `; did you mean ${guess}?` : "");
}
