/**
 * One Tor instance's files: its data folder (`<data_dir>/instance-<i>`, mode 0700, which Tor
 * insists on), its torrc, its control cookie and its `ClientOnionAuthDir`.
 *
 * The torrc is everything Tor reads: `--defaults-torrc /dev/null` keeps a system-wide
 * `torrc-defaults` out, and no `User`, `RunAsDaemon` or `PidFile` asks for privileges or a detached
 * process. `SocksPort … ExtendedErrors` makes onion failures come back as reply codes 0xF0–0xF7
 * (blamed on the destination, not the instance); `IsolateSOCKSAuth` gives each SOCKS username its
 * own circuits; `__OwningControllerProcess` makes Tor exit when the supervisor's process is gone
 * (Tor looks every 15 s) until the supervisor owns the instance over its control port, after which
 * Tor exits the moment the supervisor does (`ownership.ts`).
 *
 * @module
 */
import { join, resolve } from "node:path";
import { hostPort, type PoolConfig } from "./config.ts";

/** Where one instance's files live. */
export interface InstancePaths {
  /** The instance's `DataDirectory`. */
  readonly dir: string;
  readonly torrc: string;
  /** Tor writes it at start; the supervisor reads it to authenticate. */
  readonly cookie: string;
  /** Client authorization keys, one `<onion>.auth_private` file each. */
  readonly onionAuthDir: string;
}

/** Instance i's ports. */
export interface InstancePorts {
  readonly socks: number;
  readonly control: number;
}

/** The paths of instance `index`'s files, absolute (Tor reads them from its torrc). */
export function instancePaths(config: Pick<PoolConfig, "dataDir">, index: number): InstancePaths {
  const dir = resolve(config.dataDir, `instance-${index}`);
  return {
    dir,
    torrc: join(dir, "torrc"),
    cookie: join(dir, "control_auth_cookie"),
    onionAuthDir: join(dir, "onion_auth"),
  };
}

/** Instance `index`'s SOCKS and control ports: each base plus the index, whatever its life. */
export function instancePorts(
  config: Pick<PoolConfig, "socksBasePort" | "controlBasePort">,
  index: number,
): InstancePorts {
  return { socks: config.socksBasePort + index, control: config.controlBasePort + index };
}

/**
 * The torrc of instance `index`.
 *
 * @param config the pool config
 * @param index the instance index
 * @param ownerPid the supervisor's process id (Tor exits when it is gone)
 * @example
 * ```ts
 * import { torrcText } from "./torrc.ts";
 * const text = torrcText(
 *   { dataDir: "/var/lib/pool", listen: "127.0.0.1", socksBasePort: 9050, controlBasePort: 9150 },
 *   1,
 *   4242,
 * );
 * text.includes("SocksPort 127.0.0.1:9051 ExtendedErrors IsolateSOCKSAuth\n"); // true
 * ```
 */
export function torrcText(
  config: Pick<PoolConfig, "dataDir" | "listen" | "socksBasePort" | "controlBasePort">,
  index: number,
  ownerPid: number,
): string {
  const paths = instancePaths(config, index);
  const ports = instancePorts(config, index);
  return [
    `# Written by the Portcullis Tor pool supervisor for instance ${index}; rewritten at each spawn.`,
    `DataDirectory ${paths.dir}`,
    `SocksPort ${hostPort(config.listen, ports.socks)} ExtendedErrors IsolateSOCKSAuth`,
    `ControlPort ${hostPort(config.listen, ports.control)}`,
    "CookieAuthentication 1",
    `CookieAuthFile ${paths.cookie}`,
    `ClientOnionAuthDir ${paths.onionAuthDir}`,
    `__OwningControllerProcess ${ownerPid}`,
    "Log notice stdout",
    "AvoidDiskWrites 1",
    "RunAsDaemon 0",
    "ClientOnly 1",
    "SafeLogging 1",
    "",
  ].join("\n");
}

/** The arguments Tor is started with. */
export function torArgs(paths: InstancePaths): string[] {
  return ["-f", paths.torrc, "--defaults-torrc", "/dev/null"];
}

/**
 * Makes instance `index`'s folders (mode 0700: Tor refuses a data or auth folder others can read)
 * and writes its torrc (mode 0600).
 *
 * @returns the instance's paths
 */
export async function prepareInstance(
  config: Pick<PoolConfig, "dataDir" | "listen" | "socksBasePort" | "controlBasePort">,
  index: number,
  ownerPid: number,
): Promise<InstancePaths> {
  const paths = instancePaths(config, index);
  await privateDir(config.dataDir);
  await privateDir(paths.dir);
  await privateDir(paths.onionAuthDir);
  await Deno.writeTextFile(paths.torrc, torrcText(config, index, ownerPid), { mode: 0o600 });
  await Deno.chmod(paths.torrc, 0o600);
  return paths;
}

/** Creates a folder if needed and sets it to 0700 (mkdir's mode is subject to the umask). */
async function privateDir(path: string): Promise<void> {
  await Deno.mkdir(path, { recursive: true, mode: 0o700 });
  await Deno.chmod(path, 0o700);
}
