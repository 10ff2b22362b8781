/**
 * A proxy route's `tls` block compiled for its `https://` backends: the PEM files read from the
 * tenants folder (inside it, no symlink out, the key only when only its owner may read it), checked
 * at load time — every certificate parses, the key parses and belongs to the chain — so a bad PEM
 * is a config problem naming the file and field, not a handshake failure at the first request;
 * then turned into one {@link UpstreamTls} per backend host.
 *
 * @module
 */
import { createHash, createPrivateKey, X509Certificate } from "node:crypto";
import { isAbsolute, join, normalize, relative } from "node:path";
import { readRootedText, RootedReadError } from "../config/rooted_read.ts";
import type { RouteDocument } from "../config/tenant_schema.ts";
import type { UpstreamTls } from "../egress/upstream_tls.ts";

/** A route's `proxy.tls` block as validated. */
export type TlsBlock = NonNullable<NonNullable<RouteDocument["proxy"]>["tls"]>;

/** The PEM material of a route, read once; `forHost` makes each backend's settings. */
export interface RouteTls {
  forHost(hostname: string): UpstreamTls;
}

/** Reports a problem with one field of the `tls` block. */
type Fail = (field: keyof TlsBlock, value: string, message: string) => void;

const MAX_PEM_BYTES = 1 << 20;

/**
 * Reads and checks a route's TLS files.
 *
 * @param dir the tenants folder the files live in
 * @param block the route's `proxy.tls` (absent: the runtime's roots, no client certificate)
 * @param fail reports a problem naming the field and file
 * @returns the route's TLS, or undefined when a file could not be used (a problem was reported)
 */
export async function compileRouteTls(
  dir: string,
  block: TlsBlock | undefined,
  fail: Fail,
): Promise<RouteTls | undefined> {
  const given = block ?? { min_version: "TLSv1.2" as const };
  if ((given.cert_file === undefined) !== (given.key_file === undefined)) {
    const field = given.cert_file === undefined ? "key_file" : "cert_file";
    fail(field, given[field]!, "A client certificate needs both cert_file and key_file");
    return undefined;
  }
  const read = async (field: "ca_file" | "cert_file" | "key_file") => {
    const name = given[field];
    return name === undefined
      ? undefined
      : await readPem(dir, name, field === "key_file", (m) => fail(field, name, m));
  };
  const ca = await read("ca_file"), cert = await read("cert_file"), key = await read("key_file");
  if ([ca, cert, key].includes(null)) return undefined;
  const problem = checkPem({ ca: ca ?? undefined, cert: cert ?? undefined, key: key ?? undefined });
  if (problem) {
    fail(problem.field, given[problem.field] ?? "", problem.message);
    return undefined;
  }
  const digest = createHash("sha256").update(`${ca}\0${cert}\0${given.min_version}`)
    .digest("base64url").slice(0, 16);
  return {
    forHost(hostname: string): UpstreamTls {
      const servername = given.server_name ?? hostname;
      return {
        servername,
        ca: ca ?? undefined,
        cert: cert ?? undefined,
        key: key ?? undefined,
        minVersion: given.min_version,
        identity: `${servername}|${digest}`,
      };
    },
  };
}

/** The PEM certificates in `text` (every `BEGIN CERTIFICATE` block), parsed. */
function certificatesIn(text: string): X509Certificate[] {
  const blocks = text.match(/-----BEGIN CERTIFICATE-----[\s\S]+?-----END CERTIFICATE-----/g) ?? [];
  return blocks.map((block) => new X509Certificate(block));
}

/**
 * What is wrong with the PEM material, if anything: roots and chain must hold at least one
 * certificate each and parse, the key must parse and belong to the chain's first certificate.
 */
function checkPem(
  pem: { ca?: string; cert?: string; key?: string },
): { field: "ca_file" | "cert_file" | "key_file"; message: string } | undefined {
  const failed = (field: "ca_file" | "cert_file" | "key_file", error: unknown) => ({
    field,
    message: `Not a usable PEM file: ${(error as Error).message ?? error}`,
  });
  for (const field of ["ca", "cert"] as const) {
    const text = pem[field];
    if (text === undefined) continue;
    try {
      if (certificatesIn(text).length === 0) throw new Error("no certificate in it");
    } catch (error) {
      return failed(`${field}_file`, error);
    }
  }
  if (pem.key === undefined || pem.cert === undefined) return undefined;
  try {
    const key = createPrivateKey(pem.key);
    if (!certificatesIn(pem.cert)[0].checkPrivateKey(key)) {
      return { field: "key_file", message: "The key does not belong to cert_file's certificate" };
    }
  } catch (error) {
    return failed("key_file", error);
  }
  return undefined;
}

/** A PEM file inside `dir`, or null when it cannot be used (reported through `fail`). */
async function readPem(
  dir: string,
  name: string,
  secret: boolean,
  fail: (message: string) => void,
): Promise<string | null> {
  const path = normalize(isAbsolute(name) ? name : join(dir, name));
  const rest = relative(dir, path);
  if (rest.startsWith("..") || isAbsolute(rest)) {
    fail("A TLS file must be inside the tenants folder");
    return null;
  }
  try {
    return await readRootedText(dir, rest, { maxBytes: MAX_PEM_BYTES, secret });
  } catch (error) {
    fail(error instanceof RootedReadError ? error.detail : `Cannot read it: ${error}`);
    return null;
  }
}
