/**
 * Compiles Portcullis into one binary with the permission flags of one config baked in.
 *
 * ```
 * deno run -A scripts/compile.ts [--print] [--output PATH] <config.yaml | hub.yaml>
 * ```
 *
 * The flags are derived exactly as `portcullis flags <file>` derives them (edge or hub config),
 * then `deno compile --no-prompt <flags> --config <deno.json> --include src/edge/worker_entry.ts
 * --output <PATH> main.ts` runs with the same `deno` that runs this script. `--print` prints that
 * command line instead (one line) and exits 0. `--output` defaults to this checkout's
 * `dist/portcullis` (`dist/portcullis-hub` for a hub config). Paths in the command are relative to
 * the working directory, and `--config` names this checkout's `deno.json`, so its imports resolve
 * wherever the script runs. The script itself needs `--allow-read` and `--allow-run` (to start
 * `deno compile`), nothing more.
 *
 * **Name the config as it will be named at run time.** The flags hold the config's paths as given,
 * and Deno resolves a relative grant path against the working directory when the binary starts.
 * Run this script from the folder the service will use as its working directory (systemd's
 * `WorkingDirectory=`, a container's `WORKDIR`), naming the config `config.yaml`; then start the
 * binary there as `portcullis serve config.yaml`. A binary compiled from the checkout root with
 * `deploy/example/config.yaml` must likewise be started from the checkout root.
 *
 * `deno compile` downloads a `denort` runtime from Deno's release host. Offline, set `DENORT_BIN`
 * to a `denort` of the same Deno version; it reaches `deno compile` through the environment.
 *
 * Exit status: 0 compiled (or printed), 1 refused (invalid config, or `deno compile` failed),
 * 2 usage.
 *
 * @module
 */
import { relative } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { formatFlags, requiredGrants } from "../src/boot/flags.ts";
import { resolveConfig } from "../src/config/load.ts";
import { ConfigError, formatProblem } from "../src/config/problems.ts";
import { readYaml } from "../src/config/yaml_file.ts";
import { isHubFile, resolveHubConfig } from "../src/hub/config.ts";
import { hubGrants } from "../src/hub/grants.ts";

const USAGE = "usage: deno run -A scripts/compile.ts [--print] [--output PATH] <config.yaml>";

/** The checkout this script belongs to; `main.ts`, `deno.json` and `dist/` are found from here. */
const ROOT = fileURLToPath(new URL("../", import.meta.url));

/** One config's permission flags, and what a service running it needs to know. */
export interface DerivedFlags {
  /** An edge (`portcullis serve`) or a hub (`portcullis hub`). */
  readonly role: "edge" | "hub";
  readonly nodeId: string;
  /** The flags on one line, exactly as `portcullis flags <file>` prints them. */
  readonly flags: string;
  /** An edge's `drain.timeout_ms` (a hub stops at once). */
  readonly drainMs?: number;
  /** An edge's `drain.lame_duck_ms`: how long it stays up, not ready, before the drain proper. */
  readonly lameDuckMs?: number;
}

/**
 * Derives the permission flags a config needs, as `portcullis flags <file>` does.
 *
 * @param file the config path, as the binary will be given it at run time
 * @returns the config's role, node id and flags
 * @throws {ConfigError} naming the file, field and value of every problem found
 */
export async function deriveFlags(file: string): Promise<DerivedFlags> {
  const source = await readYaml(file);
  if (Array.isArray(source)) throw new ConfigError(source);
  if (isHubFile(source)) {
    const hub = resolveHubConfig(source);
    return { role: "hub", nodeId: hub.nodeId, flags: formatFlags(hubGrants(hub)) };
  }
  const edge = resolveConfig(source);
  return {
    role: "edge",
    nodeId: edge.nodeId,
    // The binary embeds the request worker's modules: no read grant for the checkout's code.
    flags: formatFlags(requiredGrants(edge, { embeddedCode: true })),
    drainMs: edge.drainMs,
    lameDuckMs: edge.lameDuckMs,
  };
}

/**
 * V8 flags baked into the binary: each isolate's young generation capped at 1 MB per semi-space
 * (without it every request worker grows its semi-spaces to 16 MB under load and keeps the pages —
 * RSS climbed for minutes with two workers while every V8 heap stayed flat, decisions §16), and
 * dead array buffers (socket reads) freed at each collection rather than by a background sweeper
 * that falls behind under load (decisions §19).
 */
export const V8_FLAGS = "--v8-flags=--max-semi-space-size=1,--no-concurrent-array-buffer-sweeping";

/**
 * The `deno compile` command line for a set of flags, with paths relative to the working
 * directory so the printed line runs as-is from there.
 *
 * @param flags the permission flags, as `deriveFlags` returns them
 * @param output where the binary goes
 * @param cwd the working directory the command runs in
 * @returns the command and its arguments
 */
export function compileCommand(flags: string, output: string, cwd: string = Deno.cwd()): string[] {
  const fromCwd = (path: string) => relative(cwd, `${ROOT}${path}`) || ".";
  return [
    Deno.execPath(),
    "compile",
    "--no-prompt",
    V8_FLAGS,
    ...flags.split(" ").filter((flag) => flag !== ""),
    "--config",
    fromCwd("deno.json"),
    "--include",
    fromCwd("src/edge/worker_entry.ts"),
    "--output",
    output,
    fromCwd("main.ts"),
  ];
}

/**
 * Quotes one argument for a POSIX shell when it needs it.
 *
 * @example
 * ```ts
 * import { shellQuote } from "./compile.ts";
 * shellQuote("--allow-net=127.0.0.1:8080"); // "--allow-net=127.0.0.1:8080"
 * shellQuote("--allow-net=[::1]:8080"); // "'--allow-net=[::1]:8080'"
 * ```
 */
export function shellQuote(argument: string): string {
  return /^[A-Za-z0-9_\/.,:=@%+-]+$/.test(argument)
    ? argument
    : `'${argument.replaceAll("'", `'\\''`)}'`;
}

/**
 * Runs the script.
 *
 * @param args the command-line arguments
 * @returns the exit status
 */
export async function main(args: readonly string[]): Promise<number> {
  const invocation = await invoke(args, {
    options: { print: { type: "boolean" }, output: { type: "string" } },
    usage: USAGE,
    refused: "nothing was compiled",
  });
  if (typeof invocation === "number") return invocation;
  const { values: parsedValues, derived, file } = invocation;
  const parsed = { values: parsedValues as { print?: boolean; output?: string } };
  const binary = derived.role === "hub" ? "portcullis-hub" : "portcullis";
  const output = parsed.values.output ?? (relative(Deno.cwd(), `${ROOT}dist/${binary}`) || binary);
  const [command, ...rest] = compileCommand(derived.flags, output);
  if (parsed.values.print) {
    console.log([command, ...rest].map(shellQuote).join(" "));
    return 0;
  }
  const { code } = await new Deno.Command(command, { args: rest }).spawn().status;
  if (code !== 0) {
    console.error(`portcullis: deno compile failed (exit ${code}); nothing was compiled`);
    return 1;
  }
  console.error(`portcullis: compiled ${output} for ${file} with ${derived.flags}`);
  return 0;
}

if (import.meta.main) {
  Deno.exit(await main(Deno.args));
}

/**
 * Reads a script's arguments (options and exactly one config file) and derives the config's flags,
 * reporting usage errors (status 2) and config problems (status 1) the way `main.ts` does.
 *
 * @returns the option values and the derived flags, or the exit status
 */
export async function invoke(
  args: readonly string[],
  how: {
    options: Record<string, { type: "string" | "boolean" }>;
    usage: string;
    /** Ends the problem summary, e.g. "nothing was compiled". */
    refused: string;
  },
): Promise<
  | { values: Record<string, string | boolean | undefined>; file: string; derived: DerivedFlags }
  | number
> {
  let parsed;
  try {
    parsed = parseArgs({
      args: [...args],
      options: how.options,
      allowPositionals: true,
      strict: true,
    });
  } catch (error) {
    console.error(`portcullis: ${error instanceof Error ? error.message : error}`);
    console.error(how.usage);
    return 2;
  }
  if (parsed.positionals.length !== 1) {
    const what = parsed.positionals.length === 0 ? "missing config file" : "unexpected arguments";
    console.error(`portcullis: ${what}`);
    console.error(how.usage);
    return 2;
  }
  try {
    const file = parsed.positionals[0];
    return { values: parsed.values, file, derived: await deriveFlags(file) };
  } catch (error) {
    if (!(error instanceof ConfigError)) throw error;
    for (const problem of error.problems) console.error(`portcullis: ${formatProblem(problem)}`);
    console.error(`portcullis: ${error.problems.length} problem(s); ${how.refused}`);
    return 1;
  }
}
