/**
 * The Portcullis command line.
 *
 * ```
 * portcullis [serve] <config.yaml>   run the gateway (the default verb)
 * portcullis check <config.yaml>     validate config and tenants, print a summary
 * portcullis flags <config.yaml>     print the Deno permission flags the config needs
 * portcullis hub <hub.yaml>          run a hub (serves a runtime folder to remote edges)
 * portcullis hub init-ca <hub.yaml> --name <host>   make the fleet CA (see src/cli/fleet.ts)
 * portcullis hub add-node <hub.yaml> <node_id>      a node's one-time registration secret
 * portcullis hub revoke <hub.yaml> <node_id>        revoke a node's certificates (or token)
 * portcullis torpool <pool.yaml>     run a Tor pool supervisor (its JSON API on a Unix socket)
 * portcullis [serve] <door.yaml>     run a door (a cover page, and 302s to healthy mirrors)
 * portcullis check <folder>          validate a runtime folder (globals.yaml + tenants)
 * portcullis probe <url>             GET a URL, exit 0 on 2xx (a container HEALTHCHECK)
 * portcullis help [verb]             the usage, or one verb's (also: portcullis <verb> --help)
 * portcullis --version
 * ```
 *
 * `check` and `flags` take a hub config too (one that says `role: hub`), and a Tor pool config
 * (`role: torpool`). `flags` refuses a config `check` refuses. A first word that is neither a verb
 * nor a file is named as an unknown verb, with the verb it most looks like (src/cli/usage.ts).
 *
 * What talks to a person (`check`, `flags`, `help`, the fleet verbs) writes plain text; a running
 * server (`serve`, `hub`, `torpool`) writes its stderr as JSON lines with `time`, `level` and
 * `msg` (src/observe/diag.ts), its refusal to start included.
 *
 * Exit status: 0 success, 1 refused (invalid config, permission audit, bind failure, a revoked
 * node; probe: no 2xx answer), 2 usage, 3 stopped because the hub revoked this node, 4 stopped by
 * SIGUSR1 (src/boot/debug_signal.ts).
 *
 * @module
 */
import denoJson from "./deno.json" with { type: "json" };
import { LANES } from "./lanes/mod.ts";
import { auditBeforeBoot } from "./src/boot/audit.ts";
import { formatFlags, requiredGrants } from "./src/boot/flags.ts";
import { summarizePlan } from "./src/cli/summary.ts";
import { type EdgeConfig, resolveConfig, runsWorkers } from "./src/config/load.ts";
import { readYaml, type YamlFile } from "./src/config/yaml_file.ts";
import { isHubFile, loadHubConfig } from "./src/hub/config.ts";
import { checkRuntimeFolder, runHubVerb, summarizeFolder } from "./src/hub/run.ts";
import { ConfigError, formatProblem } from "./src/config/problems.ts";
import { loadErrorPages } from "./src/config/errors_schema.ts";
import { BootError } from "./src/boot/boot_error.ts";
import { stopOnDebugSignal } from "./src/boot/debug_signal.ts";
import { runTorpoolVerb } from "./src/cli/torpool.ts";
import { FLEET_VERBS, runFleetVerb } from "./src/cli/fleet.ts";
import { runProbe } from "./src/cli/probe.ts";
import {
  doorReferences,
  edgeReferences,
  type Findings,
  hubReferences,
} from "./src/cli/references.ts";
import {
  asksForHelp,
  isVerb,
  unknownVerb,
  usage,
  usageLines,
  type Verb,
  verbUsage,
} from "./src/cli/usage.ts";
import { diagnostics } from "./src/observe/diag.ts";
import { flushStandardOutlets } from "./src/observe/log_outlet.ts";
import { isPoolFile, resolvePoolConfig } from "./src/torpool/config.ts";
import { isDoorFile, loadDoorConfig, runDoorVerb } from "./src/door/run.ts";
import { startWorkers } from "./src/edge/workers.ts";
import { followSignals } from "./src/edge/signals.ts";
import { type EdgePlan, planEdge } from "./src/edge/plan.ts";
import { deleteCachedSets, prepareRemoteNode, readRevokedMarker } from "./src/edge/revocation.ts";

/** The running version, from deno.json. */
export const VERSION: string = denoJson.version;

/**
 * Runs the CLI.
 *
 * @param args the command-line arguments
 * @returns the exit status
 */
export async function main(args: readonly string[]): Promise<number> {
  const [first, ...rest] = args;
  if (first === "--version" || first === "-V") {
    console.log(`portcullis ${VERSION}`);
    return 0;
  }
  if (first === undefined) return usageError("missing verb or config file");
  if (first === "help") return help(rest);
  if (asksForHelp(args)) {
    console.log(isVerb(first) ? verbUsage(first) : usage());
    return 0;
  }
  if (first === "hub" && FLEET_VERBS.includes(rest[0])) {
    // An operator's verb: any failure (a CA that exists, a node never issued) is its message.
    return await reportErrors(() => runFleetVerb(rest[0], rest.slice(1)), "text", true);
  }
  if (!isVerb(first)) {
    const wrong = unknownVerb(first, rest, await exists(first));
    if (wrong) return usageError(wrong);
  }
  const verb = isVerb(first) ? first : "serve";
  const operands = isVerb(first) ? rest : args;
  if (operands.length !== 1 || operands[0].startsWith("-")) {
    const what = verb === "probe" ? "a URL" : "a config file";
    return usageError(
      operands.length === 0
        ? `${verb} needs ${what}`
        : `${verb} takes ${what}, not ${operands.map((o) => JSON.stringify(o)).join(" ")}`,
      verb,
    );
  }
  if (verb === "probe") return await runProbe(operands[0]);
  const voice = verb === "check" || verb === "flags" ? "text" : "json";
  // A server: SIGUSR1 would open a debugger any local user can reach (src/boot/debug_signal.ts).
  if (voice === "json") stopOnDebugSignal({ log: (line) => diagnostics().line(line) });
  return await reportErrors(() => run(verb, operands[0]), voice);
}

/** `portcullis help [verb]`: the usage, or one verb's. */
function help(args: readonly string[]): number {
  if (args.length === 0) {
    console.log(usage());
    return 0;
  }
  if (args.length === 1 && isVerb(args[0])) {
    console.log(verbUsage(args[0]));
    return 0;
  }
  if (args.length === 1) return usageError(unknownVerb(args[0], ["help"], false)!);
  return usageError(`help takes one verb, not ${args.length}`, "help");
}

/** A usage error: its line, then the verb's usage lines (or where to find them); status 2. */
function usageError(message: string, verb?: Verb): number {
  console.error(`portcullis: ${message}`);
  console.error(verb ? usageLines(verb) : "run `portcullis help` for the verbs and their usage");
  return 2;
}

/**
 * Runs a verb, turning a config problem or a refused boot into its lines and status 1 (and, for
 * the operator's verbs, any other error into its message). A server's verb writes them as the
 * diagnostic log's JSON lines; a person's verb as text.
 */
async function reportErrors(
  verb: () => Promise<number>,
  voice: "text" | "json",
  anyError = false,
): Promise<number> {
  const json = diagnostics();
  const say = (level: "error" | "warn", line: string) =>
    voice === "json" ? json[level](line) : console.error(`portcullis: ${line}`);
  try {
    return await verb();
  } catch (error) {
    if (error instanceof ConfigError) {
      for (const problem of error.problems) say("error", formatProblem(problem));
      say("error", `${error.problems.length} problem(s); nothing was started`);
      return 1;
    }
    if (error instanceof BootError) {
      for (const reason of error.reasons) say("error", reason);
      say("error", "boot refused");
      return 1;
    }
    if (anyError && error instanceof Error) {
      say("error", error.message);
      return 1;
    }
    throw error;
  }
}

async function run(verb: string, file: string): Promise<number> {
  if (verb === "check" && await isFolder(file)) {
    console.log(
      [`portcullis: ${file} is valid`, ...summarizeFolder(file, await checkRuntimeFolder(file))]
        .join("\n"),
    );
    return 0;
  }
  const source = await readYaml(file);
  if (Array.isArray(source)) throw new ConfigError(source);
  if (isPoolFile(source)) return runTorpoolVerb(verb, resolvePoolConfig(source));
  if (verb === "torpool") {
    console.error(
      `portcullis: ${file} is not a Tor pool config (a pool config says role: torpool)`,
    );
    return 2;
  }
  if (isHubFile(source)) {
    const hub = await loadHubConfig(source);
    // The hub refuses to start on what check refuses (a token folder that is not there).
    if (verb !== "serve") await verify(verb, hubReferences(source));
    return runHubVerb(verb, hub, VERSION);
  }
  if (isDoorFile(source)) {
    if (verb === "serve" || verb === "check" || verb === "flags") {
      const door = loadDoorConfig(source);
      if (verb !== "serve") await verify(verb, doorReferences(source));
      return runDoorVerb(verb, door, VERSION);
    }
    console.error(`portcullis: ${file} is a door config (role: door); run: portcullis ${file}`);
    return 2;
  }
  if (verb === "hub") {
    console.error(`portcullis: ${file} is not a hub config (a hub config says role: hub)`);
    return 2;
  }
  const config = resolveConfig(source);
  if (verb === "check" || verb === "flags") return await checkEdge(verb, source, config);
  const log = diagnostics({ level: config.observe.logLevel });
  if (config.runtime.kind === "remote") {
    // Before the cache is read: a revoked node refuses to start; a new one registers.
    const { hub, cacheDir } = config.runtime;
    await prepareRemoteNode({
      nodeId: config.nodeId,
      nodeType: "edge",
      hub,
      cacheDir,
      log: (line) => log.line(line),
    });
  }
  const plan = await planEdge(config, LANES, { fileLimit: "probe" });
  if (!auditBeforeBoot(plan.grants, undefined, log)) return 1;
  for (const line of describeFileLimit(plan)) log.line(line);
  const edge = await startWorkers(plan, { version: VERSION });
  // SIGTERM and SIGINT drain (lame duck first); SIGHUP reloads the runtime set.
  const stopSignals = followSignals(edge, (line) => log.line(line));
  // Said whatever observe.log_level is: supervisors and tests wait for it.
  diagnostics().info(
    `ready: node ${config.nodeId}, ` +
      `${new Set(plan.lanes.map((l) => l.table.descriptor.name)).size} lanes, ` +
      `${plan.tenants.tenants.length} tenants` +
      (runsWorkers(config)
        ? `, ${config.workers} public request worker${config.workers === 1 ? "" : "s"}`
        : ", one isolate"),
  );
  await edge.finished;
  stopSignals();
  // Exit status 3: stopped because the hub revoked this node (a supervisor should not restart it).
  // The cache goes before the process does, whichever of the edge's steps finishes first.
  if (config.runtime.kind !== "remote" || !await readRevokedMarker(config.runtime.cacheDir)) {
    return 0;
  }
  await deleteCachedSets(config.runtime.cacheDir);
  return 3;
}

/**
 * `check` and `flags` on an edge config: the plan (tenants, listeners, grants) and every file the
 * config names; a problem refuses both, a warning is printed on stderr beside what they print.
 */
async function checkEdge(
  verb: "check" | "flags",
  source: YamlFile,
  config: EdgeConfig,
): Promise<number> {
  const plan = await planEdge(config, LANES, {});
  await verify(verb, edgeReferences(source));
  await loadErrorPages(config.errors, source);
  console.log(verb === "check" ? summarizePlan(plan) : formatFlags(requiredGrants(config)));
  return 0;
}

/**
 * What `check` verifies beyond the schemas ({@link edgeReferences} and the others): its problems
 * are thrown as one {@link ConfigError}, its warnings written on stderr (as text for `check` and
 * `flags`, as the diagnostic log's lines for a server starting).
 */
async function verify(verb: string, findings: Promise<Findings>): Promise<void> {
  const { problems, warnings } = await findings;
  const log = diagnostics();
  for (const warning of warnings) {
    const line = `warning: ${formatProblem(warning)}`;
    if (verb === "check" || verb === "flags") console.error(`portcullis: ${line}`);
    else log.line(line);
  }
  if (problems.length > 0) throw new ConfigError(problems);
}

/** The boot lines about the open-file limit and the public lane's share of it. */
function describeFileLimit<S>(plan: EdgePlan<S>): string[] {
  const fds = plan.descriptors;
  if (!fds) return [];
  const limit = `${fds.limit.exact ? "" : "at least "}${fds.limit.limit}`;
  const line = `portcullis: open-file limit ${limit}: public lane max_connections ` +
    `${fds.publicConnections}${fds.derived ? " (derived from it)" : ""}, ${fds.reserved} ` +
    "descriptors kept for the protected lanes, upstream connections and the runtime";
  if (fds.derived || fds.publicConnections + fds.reserved <= fds.limit.limit) return [line];
  return [
    line,
    `portcullis: warning: ledger.lanes.public.max_connections ${fds.publicConnections} does not ` +
    `fit under the open-file limit ${fds.limit.limit} with ${fds.reserved} kept aside: a public ` +
    "flood can take the descriptors a health probe needs (raise the limit, e.g. LimitNOFILE, or " +
    "lower max_connections)",
  ];
}

async function exists(path: string): Promise<boolean> {
  return await Deno.stat(path).then(() => true, () => false);
}

async function isFolder(path: string): Promise<boolean> {
  try {
    return (await Deno.stat(path)).isDirectory;
  } catch {
    return false;
  }
}

if (import.meta.main) {
  const status = await main(Deno.args);
  // Log lines still queued leave first (bounded: a stalled reader costs them, not the exit).
  await flushStandardOutlets();
  Deno.exit(status);
}
