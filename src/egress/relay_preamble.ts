/**
 * The `socks5_tls` transport's port selector: four bytes the edge writes first inside the TLS
 * stream, naming the hub's pool port its SOCKS5 bytes are for; the relay (`hub/socks_relay.ts`)
 * reads them before it pipes anything.
 *
 * Why not ALPN, as before: the ClientHello goes in the clear, so `portcullis-socks/<port>` named
 * the product and the pool port to anyone on the path, and a server that selects such a protocol
 * confirms it to a prober before any client certificate is asked for (TLS 1.3 sends the selection
 * in EncryptedExtensions, ahead of the CertificateRequest). Inside the stream the selector is seen
 * by the hub alone, after mutual TLS; the ClientHello offers a common ALPN value (`http/1.1` by
 * default, `egress.transport.alpn`) or none.
 *
 * The format is fixed: `0x00`, version `0x01`, the port as a big-endian 16-bit number (1–65535).
 * The first byte is never a SOCKS5 greeting's (`0x05`), so an edge that sends SOCKS without a
 * preamble (one built before it) is refused at its first byte rather than at the deadline.
 * Hand-written: four bytes need no library.
 *
 * @module
 */

/** The preamble's length in bytes. */
export const PREAMBLE_BYTES = 4;

/** The preamble's first two bytes: a marker no SOCKS5 greeting starts with, and the version. */
const HEAD = [0x00, 0x01] as const;

/**
 * The preamble naming pool port `port`.
 *
 * @throws {RangeError} when `port` is not a whole number from 1 to 65535
 * @example
 * ```ts
 * import { encodePreamble } from "./relay_preamble.ts";
 * encodePreamble(9050); // Uint8Array [0, 1, 35, 90]
 * ```
 */
export function encodePreamble(port: number): Uint8Array {
  if (!Number.isInteger(port) || port < 1 || port > 65535) {
    throw new RangeError(`Pool port ${port} is not from 1 to 65535`);
  }
  return Uint8Array.of(HEAD[0], HEAD[1], port >> 8, port & 0xff);
}

/** What the bytes read so far say: not enough yet, not a preamble, or the port named. */
export type PreambleRead =
  | { readonly kind: "partial" }
  | { readonly kind: "garbage" }
  | { readonly kind: "port"; readonly port: number };

/**
 * Reads a preamble from the start of `bytes` (more may follow: they are the SOCKS stream). A wrong
 * byte is `garbage` as soon as it arrives, so a stray stream is refused without waiting.
 *
 * @example
 * ```ts
 * import { decodePreamble } from "./relay_preamble.ts";
 * decodePreamble(Uint8Array.of(0, 1, 35, 90, 5)); // { kind: "port", port: 9050 }
 * decodePreamble(Uint8Array.of(5, 1, 0)); // { kind: "garbage" }
 * ```
 */
export function decodePreamble(bytes: Uint8Array): PreambleRead {
  for (let index = 0; index < HEAD.length && index < bytes.length; index++) {
    if (bytes[index] !== HEAD[index]) return { kind: "garbage" };
  }
  if (bytes.length < PREAMBLE_BYTES) return { kind: "partial" };
  const port = (bytes[2] << 8) | bytes[3];
  return port === 0 ? { kind: "garbage" } : { kind: "port", port };
}
