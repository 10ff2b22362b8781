/**
 * `portcullis probe <url>`: one GET, exit 0 on a 2xx answer and 1 on anything else (another
 * status, a refused connection, no answer within the timeout). It is the container's HEALTHCHECK:
 * distroless images have no shell and no curl, but they have the binary, whose baked
 * `--allow-net` already grants the `local_health` listener it asks.
 *
 * node:http and node:https rather than `fetch`: one request with no redirect following, no proxy
 * taken from the environment, and, for https on a loopback address, no certificate verification
 * (the gateway may be serving its bootstrap certificate, and a probe of its own listener learns
 * nothing from the chain). Elsewhere https is verified.
 *
 * @module
 */
import http from "node:http";
import https from "node:https";
import { isIP } from "node:net";

/** How long a probe waits for the answer's head by default, in milliseconds. */
export const PROBE_TIMEOUT_MS = 3000;

/** The outcome of a probe. */
export type ProbeResult = { readonly status: number } | { readonly error: string };

/**
 * GETs `url` once and reads the status (the body is drained, not kept).
 *
 * @param url an `http:` or `https:` URL
 * @param timeoutMs how long to wait for the answer's head
 * @throws {TypeError} when the URL is not http(s)
 * @example
 * ```ts ignore
 * import { probe } from "./probe.ts";
 * const result = await probe(new URL("http://127.0.0.1:9901/readyz"));
 * console.log("status" in result ? result.status : result.error);
 * ```
 */
export function probe(url: URL, timeoutMs: number = PROBE_TIMEOUT_MS): Promise<ProbeResult> {
  if (url.protocol !== "http:" && url.protocol !== "https:") {
    throw new TypeError(`Cannot probe ${url.href}: expected an http:// or https:// URL`);
  }
  const client = url.protocol === "https:" ? https : http;
  const host = url.hostname.replace(/^\[|\]$/g, "");
  return new Promise((resolve) => {
    const request = client.get(url, {
      timeout: timeoutMs,
      headers: { "user-agent": "portcullis-probe", connection: "close" },
      // Unverified on loopback, with no CA list to load (loading the system's needs --allow-sys).
      ...(url.protocol === "https:" && isLoopbackAddress(host)
        ? { rejectUnauthorized: false, ca: [] }
        : {}),
    }, (response) => {
      response.resume();
      resolve({ status: response.statusCode ?? 0 });
      response.on("error", () => {});
    });
    request.on("timeout", () => {
      request.destroy();
      resolve({ error: `no answer within ${timeoutMs} ms` });
    });
    request.on("error", (error) => resolve({ error: error.message }));
  });
}

/**
 * Runs the `probe` verb: prints the status on stdout (or why there is none on stderr).
 *
 * @param target the URL as given
 * @returns 0 on a 2xx answer, 1 otherwise, 2 when the URL is not one
 */
export async function runProbe(target: string): Promise<number> {
  let url: URL;
  try {
    url = new URL(target);
  } catch {
    console.error(`portcullis: probe: ${JSON.stringify(target)} is not a URL`);
    return 2;
  }
  if (url.protocol !== "http:" && url.protocol !== "https:") {
    console.error(`portcullis: probe: ${url.href} is not an http:// or https:// URL`);
    return 2;
  }
  let result: ProbeResult;
  try {
    result = await probe(url);
  } catch (error) {
    // A URL outside the granted --allow-net throws at once (NotCapable).
    result = { error: (error as Error).message };
  }
  if ("error" in result) {
    console.error(`portcullis: probe: ${url.href}: ${result.error}`);
    return 1;
  }
  const ok = result.status >= 200 && result.status < 300;
  (ok ? console.log : console.error)(`portcullis: probe: ${url.href}: ${result.status}`);
  return ok ? 0 : 1;
}

/** True for 127.0.0.0/8, ::1 and `localhost`. */
function isLoopbackAddress(host: string): boolean {
  if (host === "localhost" || host === "::1") return true;
  return isIP(host) === 4 && host.startsWith("127.");
}
