/**
 * `Upgrade: h2c` is never switched to: through a gateway it would open an HTTP/2 connection to the
 * backend that no route or policy sees. A request offering it is served as plain HTTP/1.1 — or
 * refused when it announces a body, which node's parser left unread on a socket it no longer
 * parses, so nothing could frame what follows its head.
 *
 * @module
 */
import type http from "node:http";

/** True when an Upgrade field offers `h2c` (in any case, among other protocols or alone). */
export function offersH2c(upgrade: string | undefined): boolean {
  return upgrade !== undefined &&
    upgrade.split(",").some((token) => token.trim().toLowerCase().split("/")[0] === "h2c");
}

/** True when a request head announces a body (chunked, or a non-zero Content-Length). */
export function announcesBody(headers: http.IncomingHttpHeaders): boolean {
  const length = headers["content-length"];
  return headers["transfer-encoding"] !== undefined || (length !== undefined && length !== "0");
}
