/**
 * The command-line side of the Tor pool role: `torpool` (run), and `check` and `flags` on a pool
 * config (`role: torpool`). Running audits the process's permissions first, like the edge and the
 * hub: exactly the derived set (run for the Tor binary and nothing else, net for the instances'
 * ports and the API socket, read and write for the data folder), or the pool does not start.
 *
 * @module
 */
import { auditBeforeBoot, type PermissionQuery } from "../boot/audit.ts";
import { type Diagnostics, diagnostics } from "../observe/diag.ts";
import { CODE_GRANTS, formatFlags, type Grant } from "../boot/flags.ts";
import { ConfigError } from "../config/problems.ts";
import { readYaml } from "../config/yaml_file.ts";
import { type PoolConfig, poolGrants, resolvePoolConfig } from "../torpool/config.ts";
import { prefixLine, type RunningPool, runPool } from "../torpool/running.ts";

/** Every grant the pool role needs, as the boot checks take them. */
export function torpoolGrants(config: PoolConfig): Grant[] {
  return [...poolGrants(config), ...CODE_GRANTS];
}

/**
 * Loads a pool config and runs the pool until SIGINT or SIGTERM.
 *
 * @returns the exit status
 * @throws {ConfigError} naming file, field and value of every problem found
 */
export async function runTorpool(file: string): Promise<number> {
  const source = await readYaml(file);
  if (Array.isArray(source)) throw new ConfigError(source);
  return runTorpoolVerb("torpool", resolvePoolConfig(source));
}

/**
 * Runs a verb on a pool config: `flags`, `check`, `torpool`; `serve` and `hub` are refused.
 *
 * @param query the permission query the audit asks (Deno's by default)
 * @returns the exit status
 */
export async function runTorpoolVerb(
  verb: string,
  config: PoolConfig,
  query?: PermissionQuery,
): Promise<number> {
  const grants = torpoolGrants(config);
  if (verb === "flags") {
    await checkBinary(config); // flags refuses what check refuses
    console.log(formatFlags(grants));
    return 0;
  }
  if (verb === "check") {
    await checkBinary(config);
    console.log(summarize(config, grants).join("\n"));
    return 0;
  }
  if (verb !== "torpool") {
    console.error(
      `portcullis: ${config.file} is a Tor pool config (role: torpool); ` +
        `run: portcullis torpool ${config.file}`,
    );
    return 2;
  }
  const log = diagnostics();
  if (!auditBeforeBoot(grants, query, log)) return 1;
  return await serve(config, log);
}

/** Starts the pool and its API; stops both on SIGINT or SIGTERM. */
async function serve(config: PoolConfig, log: Diagnostics): Promise<number> {
  let running: RunningPool;
  try {
    running = await runPool(config, { log: (line) => log.line(prefixLine("torpool: ", line)) });
  } catch (error) {
    log.error((error as Error).message);
    return 1;
  }
  const { promise: stopped, resolve } = Promise.withResolvers<string>();
  const onSignal = (signal: Deno.Signal) => () => resolve(signal);
  const handlers = (["SIGINT", "SIGTERM"] as const).map((s) => [s, onSignal(s)] as const);
  for (const [signal, handler] of handlers) Deno.addSignalListener(signal, handler);
  log.info(
    `torpool ready: ${config.minInstances}–${config.maxInstances} Tor instances, ` +
      `SOCKS ${config.listen}:${config.socksBasePort}+i, API ${config.apiSocket}`,
  );
  const signal = await stopped;
  log.info(`torpool: ${signal}: stopping every instance`);
  await running.close();
  for (const [name, handler] of handlers) Deno.removeSignalListener(name, handler);
  log.info("torpool stopped");
  return 0;
}

/** `check` refuses a config whose Tor binary is not an executable file. */
async function checkBinary(config: PoolConfig): Promise<void> {
  let executable = false;
  try {
    const info = await Deno.stat(config.torBinary);
    executable = info.isFile && ((info.mode ?? 0o111) & 0o111) !== 0;
  } catch { /* missing */ }
  if (executable) return;
  throw new ConfigError([{
    file: config.file,
    path: ["tor_binary"],
    value: config.torBinary,
    message: "No executable file at this path (Debian: apt-get install tor)",
  }]);
}

/** The lines `check` prints for a valid pool config. */
function summarize(config: PoolConfig, grants: readonly Grant[]): string[] {
  const range = (base: number) => `${config.listen}:${base}–${base + config.maxInstances - 1}`;
  return [
    `portcullis: ${config.file} is valid`,
    `  tor pool: ${config.minInstances}–${config.maxInstances} instances of ${config.torBinary}`,
    `  SOCKS ${range(config.socksBasePort)}, control ${range(config.controlBasePort)}`,
    `  data ${config.dataDir}, API ${config.apiSocket}`,
    `  probes every ${config.probeIntervalMs} ms; dead after 2 failed probes or ` +
    `${config.deadRefusalMs} ms of SOCKS refusals`,
    `  busy at ${config.busyStreams} streams; up at ${config.scaleUpThreshold}, down below ` +
    `${config.scaleDownThreshold} after ${config.scaleCooldownMs} ms`,
    `  permissions: ${formatFlags(grants)}`,
  ];
}
