/**
 * The door's boot steps before anything binds, each a function that refuses the boot in an
 * operator's words: a door the hub revoked stays down until it is provisioned again; registration
 * with a one-time secret when the door has no certificate yet; the cover page and the door's own
 * TLS files read once.
 *
 * A revoked door may start again only with a registration secret present: the revoked certificate
 * is removed, registration makes a new one, and only then is the revocation record removed — so a
 * registration that fails leaves the door refusing, as before.
 *
 * @module
 */
import { join } from "node:path";
import { BootError } from "../boot/boot_error.ts";
import { readNamedFile } from "../config/rooted_read.ts";
import { describeIoError } from "../config/yaml_file.ts";
import type { ensureNodeCertificate } from "../live/enrol.ts";
import { readRevocation, REVOKED_FILE } from "./cache.ts";
import type { DoorConfig } from "./config.ts";

/** The largest cover page a door serves (it is held in memory and sent whole). */
export const MAX_COVER_BYTES = 1 << 20;

/** Registration, as `ensureNodeCertificate` (src/live/enrol.ts) does it; tests inject one. */
export type Enrol = typeof ensureNodeCertificate;

/**
 * Refuses the boot of a revoked door, unless a registration secret is present to provision it
 * again (the revoked certificate is then removed, so registration makes a new one).
 *
 * @returns true when the door was revoked and is being provisioned again
 * @throws {BootError} telling the operator to provision the door again
 */
export async function checkRevocation(
  config: DoorConfig,
  log: (line: string) => void,
): Promise<boolean> {
  const revocation = await readRevocation(config.cacheDir);
  if (!revocation) return false;
  const record = join(config.cacheDir, REVOKED_FILE);
  const secret = config.hub.register?.secretFile;
  if (secret && config.hub.tls && await exists(secret)) {
    log(
      `portcullis: door: the hub revoked this door at ${revocation.at}; a registration secret ` +
        `is present (${secret}): registering again`,
    );
    await Deno.remove(config.hub.tls.certFile).catch(() => {});
    return true;
  }
  throw new BootError([
    `The hub revoked this door at ${revocation.at} (${revocation.reason}); ${record} says so`,
    secret
      ? `Provision it again: put a new registration secret (portcullis hub add-node) at ${secret}, ` +
        "then start it"
      : "Provision it again: give it new credentials the hub accepts, remove " +
        `${record}, then start it`,
  ]);
}

/**
 * Registers with the hub when the config says how (`hub.register`, https) and the certificate
 * is missing; the one call site of registration in the door's boot. With https and no
 * `hub.register` it still completes a key and certificate a renewal's crash left half written
 * (src/live/node_pair.ts).
 *
 * @throws {BootError} when registration fails, or there is neither certificate nor secret
 */
export async function register(
  config: DoorConfig,
  enrol: Enrol,
  log: (line: string) => void,
): Promise<void> {
  const { hub, nodeId } = config;
  if (!hub.tls) return;
  let outcome: Awaited<ReturnType<Enrol>>;
  try {
    outcome = await enrol({
      nodeId,
      nodeType: "door",
      hub: { url: hub.url, ...hub.tls, secretFile: hub.register?.secretFile },
      log,
    });
  } catch (error) {
    throw new BootError([`Registration with the hub failed: ${(error as Error).message}`]);
  }
  if (outcome === "none" && hub.register) {
    throw new BootError([
      `The door has no certificate (${hub.tls.certFile}) and no registration secret ` +
      `(${hub.register.secretFile}): make one with portcullis hub add-node`,
    ]);
  }
}

/**
 * Reads the cover page.
 *
 * @throws {BootError} when it cannot be read or is larger than {@link MAX_COVER_BYTES}
 */
export async function readCover(file: string): Promise<Uint8Array> {
  let bytes: Uint8Array;
  try {
    const info = await Deno.stat(file);
    if (info.size > MAX_COVER_BYTES) {
      throw new BootError([
        `The cover page ${file} is ${info.size} bytes; a door serves at most ${MAX_COVER_BYTES}`,
      ]);
    }
    bytes = await Deno.readFile(file);
  } catch (error) {
    if (error instanceof BootError) throw error;
    throw new BootError([`Cannot read the cover page ${file}: ${describeIoError(error)}`]);
  }
  return bytes;
}

/**
 * Reads each TLS public listener's certificate and key (the key must be the owner's alone).
 *
 * @throws {BootError} naming the file that cannot be read
 */
export async function readOwnTls(
  config: DoorConfig,
): Promise<({ cert: string; key: string } | undefined)[]> {
  const out: ({ cert: string; key: string } | undefined)[] = [];
  for (const [i, listener] of config.listen.entries()) {
    if (!listener.tls) {
      out.push(undefined);
      continue;
    }
    try {
      const pem = { maxBytes: 1 << 20 };
      const cert = await readNamedFile(listener.tls.certFile, `listen[${i}].tls.cert_file`, pem);
      const key = await readNamedFile(listener.tls.keyFile, `listen[${i}].tls.key_file`, {
        ...pem,
        secret: true,
      });
      out.push({ cert, key });
    } catch (error) {
      throw new BootError([(error as Error).message]);
    }
  }
  return out;
}

async function exists(path: string): Promise<boolean> {
  return await Deno.lstat(path).then(() => true, () => false);
}
