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
 * portcullis --version
 * ```
 *
 * `check` and `flags` take a hub config too (one that says `role: hub`), and a Tor pool config
 * (`role: torpool`).
 *
 * ```
 * ```
 *
 * Exit status: 0 success, 1 refused (invalid config, permission audit, bind failure, a revoked
 * node), 2 usage, 3 stopped because the hub revoked this node.
 *
 * @module
 */
import denoJson from "./deno.json" with { type: "json" };
import { LANES } from "./lanes/mod.ts";
import { auditBeforeBoot } from "./src/boot/audit.ts";
import { formatFlags, requiredGrants } from "./src/boot/flags.ts";
import { summarizePlan } from "./src/cli/summary.ts";
import { resolveConfig, runsWorkers } from "./src/config/load.ts";
import { readYaml } from "./src/config/yaml_file.ts";
import { isHubFile, loadHubConfig } from "./src/hub/config.ts";
import { checkRuntimeFolder, runHubVerb, summarizeFolder } from "./src/hub/run.ts";
import { ConfigError, formatProblem } from "./src/config/problems.ts";
import { BootError } from "./src/boot/boot_error.ts";
import { runTorpoolVerb } from "./src/cli/torpool.ts";
import { FLEET_USAGE, FLEET_VERBS, runFleetVerb } from "./src/cli/fleet.ts";
import { isPoolFile, resolvePoolConfig } from "./src/torpool/config.ts";
import { isDoorFile, loadDoorConfig, runDoorVerb } from "./src/door/run.ts";
import { startWorkers } from "./src/edge/workers.ts";
import { type EdgePlan, planEdge } from "./src/edge/plan.ts";
import { deleteCachedSets, prepareRemoteNode, readRevokedMarker } from "./src/edge/revocation.ts";

/** The running version, from deno.json. */
export const VERSION: string = denoJson.version;

const USAGE = `usage: portcullis [serve] <config.yaml | door.yaml>
       portcullis check <config.yaml>
       portcullis flags <config.yaml | hub.yaml | pool.yaml | door.yaml>
       portcullis hub <hub.yaml>
${FLEET_USAGE}
       portcullis torpool <pool.yaml>
       portcullis check <config.yaml | hub.yaml | pool.yaml | door.yaml | runtime folder>
       portcullis --version`;

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
  if (first === "--help" || first === "-h") {
    console.log(USAGE);
    return 0;
  }
  if (first === "hub" && FLEET_VERBS.includes(rest[0])) {
    // An operator's verb: any failure (a CA that exists, a node never issued) is its message.
    return await reportErrors(() => runFleetVerb(rest[0], rest.slice(1)), true);
  }
  const verbs = ["serve", "check", "flags", "hub", "torpool"];
  const verb = verbs.includes(first) ? first : "serve";
  const operands = verbs.includes(first) ? rest : args;
  if (operands.length !== 1 || operands[0].startsWith("-")) {
    console.error(
      `portcullis: ${operands.length === 0 ? "missing config file" : "unexpected arguments"}`,
    );
    console.error(USAGE);
    return 2;
  }
  return await reportErrors(() => run(verb, operands[0]));
}

/**
 * Runs a verb, turning a config problem or a refused boot into its lines and status 1 (and, for
 * the operator's verbs, any other error into its message).
 */
async function reportErrors(verb: () => Promise<number>, anyError = false): Promise<number> {
  try {
    return await verb();
  } catch (error) {
    if (error instanceof ConfigError) {
      for (const problem of error.problems) console.error(`portcullis: ${formatProblem(problem)}`);
      console.error(`portcullis: ${error.problems.length} problem(s); nothing was started`);
      return 1;
    }
    if (error instanceof BootError) {
      for (const reason of error.reasons) console.error(`portcullis: ${reason}`);
      console.error("portcullis: boot refused");
      return 1;
    }
    if (anyError && error instanceof Error) {
      console.error(`portcullis: ${error.message}`);
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
  if (isHubFile(source)) return runHubVerb(verb, await loadHubConfig(source), VERSION);
  if (isDoorFile(source)) {
    if (verb === "serve" || verb === "check" || verb === "flags") {
      return runDoorVerb(verb, loadDoorConfig(source), VERSION);
    }
    console.error(`portcullis: ${file} is a door config (role: door); run: portcullis ${file}`);
    return 2;
  }
  if (verb === "hub") {
    console.error(`portcullis: ${file} is not a hub config (a hub config says role: hub)`);
    return 2;
  }
  const config = resolveConfig(source);
  if (verb === "flags") {
    console.log(formatFlags(requiredGrants(config)));
    return 0;
  }
  if (verb === "serve" && config.runtime.kind === "remote") {
    // Before the cache is read: a revoked node refuses to start; a new one registers.
    const { hub, cacheDir } = config.runtime;
    const log = (line: string) => console.error(line);
    await prepareRemoteNode({ nodeId: config.nodeId, nodeType: "edge", hub, cacheDir, log });
  }
  const plan = await planEdge(config, LANES, verb === "serve" ? { fileLimit: "probe" } : {});
  if (verb === "check") {
    console.log(summarizePlan(plan));
    return 0;
  }
  if (!auditBeforeBoot(plan.grants)) return 1;
  const fileLines = describeFileLimit(plan);
  for (const line of fileLines) console.error(line);
  const edge = await startWorkers(plan, { version: VERSION });
  const onSignal = () => edge.drain();
  Deno.addSignalListener("SIGTERM", onSignal);
  Deno.addSignalListener("SIGINT", onSignal);
  console.error(
    `portcullis: ready: node ${config.nodeId}, ` +
      `${new Set(plan.lanes.map((l) => l.table.descriptor.name)).size} lanes, ` +
      `${plan.tenants.tenants.length} tenants` +
      (runsWorkers(config)
        ? `, ${config.workers} public request worker${config.workers === 1 ? "" : "s"}`
        : ", one isolate"),
  );
  await edge.finished;
  Deno.removeSignalListener("SIGTERM", onSignal);
  Deno.removeSignalListener("SIGINT", onSignal);
  // Exit status 3: stopped because the hub revoked this node (a supervisor should not restart it).
  // The cache goes before the process does, whichever of the edge's steps finishes first.
  if (config.runtime.kind !== "remote" || !await readRevokedMarker(config.runtime.cacheDir)) {
    return 0;
  }
  await deleteCachedSets(config.runtime.cacheDir);
  return 3;
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

async function isFolder(path: string): Promise<boolean> {
  try {
    return (await Deno.stat(path)).isDirectory;
  } catch {
    return false;
  }
}

if (import.meta.main) {
  Deno.exit(await main(Deno.args));
}
