/**
 * The bytes of a SOCKS5 exchange (RFC 1928, RFC 1929): the greeting, the username/password
 * sub-negotiation, the CONNECT request with its address encoding, and the reading of a CONNECT
 * reply's bound address. Plain functions over `Uint8Array`, no socket: the exchange in
 * `socks5_exchange.ts` decides when each is sent or read.
 *
 * Kept apart from the exchange so the encoding can be read (and tested, {@link encodeConnect})
 * against the RFC's tables on its own; `socks5.ts` says why the client is hand-written.
 *
 * @module
 */
import { isIPv4 } from "node:net";

const encoder = new TextEncoder();

/**
 * The greeting (RFC 1928 §3): offers no auth, and username/password with credentials.
 *
 * @param withAuth whether credentials will be offered
 * @returns the greeting bytes
 */
export function encodeGreeting(withAuth: boolean): Uint8Array {
  return withAuth ? Uint8Array.of(0x05, 2, 0x00, 0x02) : Uint8Array.of(0x05, 1, 0x00);
}

/** `0x5a` style. */
export function hex(byte: number): string {
  return `0x${byte.toString(16).padStart(2, "0")}`;
}

/** Parses an IPv6 literal (no zone) into 16 bytes, or `undefined` when it is not one. */
function parseIPv6(text: string): Uint8Array | undefined {
  const halves = text.split("::");
  if (halves.length > 2) return undefined;
  const groups = halves.map((half) => (half === "" ? [] : half.split(":")));
  const words: number[][] = [];
  for (const [h, half] of groups.entries()) {
    const out: number[] = [];
    for (const [i, group] of half.entries()) {
      const last = h === groups.length - 1 && i === half.length - 1;
      if (last && isIPv4(group)) {
        const [a, b, c, d] = group.split(".").map(Number);
        out.push((a << 8) | b, (c << 8) | d);
      } else if (/^[0-9a-f]{1,4}$/i.test(group)) {
        out.push(parseInt(group, 16));
      } else return undefined;
    }
    words.push(out);
  }
  const count = words.reduce((sum, w) => sum + w.length, 0);
  if (halves.length === 1 ? count !== 8 : count > 7) return undefined;
  const all = [...words[0], ...Array(8 - count).fill(0), ...(words[1] ?? [])];
  return Uint8Array.from(all.flatMap((word) => [word >> 8, word & 0xff]));
}

/**
 * Encodes the CONNECT request: an IPv4 literal as ATYP 1, an IPv6 literal (with or without
 * brackets) as ATYP 4, anything else as ATYP 3, a domain name passed through untouched.
 *
 * @param host the destination host
 * @param port the destination port
 * @returns the request bytes
 * @throws {RangeError} when the port is not 1–65535, the domain is empty or longer than 255
 * bytes, or a bracketed host is not an IPv6 literal
 * @example
 * ```ts
 * import { encodeConnect } from "./socks5_wire.ts";
 * encodeConnect("127.0.0.1", 80); // Uint8Array [5, 1, 0, 1, 127, 0, 0, 1, 0, 80]
 * encodeConnect("shop.onion", 80).length; // 4 + 1 + 10 + 2
 * ```
 */
export function encodeConnect(host: string, port: number): Uint8Array {
  if (!Number.isInteger(port) || port < 1 || port > 65535) {
    throw new RangeError(`Port ${port} is not in 1-65535`);
  }
  let address: Uint8Array;
  const bracketed = host.startsWith("[") && host.endsWith("]");
  const ipv6 = parseIPv6(bracketed ? host.slice(1, -1) : host);
  if (isIPv4(host)) {
    address = Uint8Array.of(0x01, ...host.split(".").map(Number));
  } else if (ipv6) {
    address = Uint8Array.of(0x04, ...ipv6);
  } else if (bracketed) {
    throw new RangeError("Bracketed host is not an IPv6 literal");
  } else {
    const name = encoder.encode(host);
    if (name.length < 1 || name.length > 255) {
      throw new RangeError(`Domain name is ${name.length} bytes; SOCKS5 carries 1-255`);
    }
    address = Uint8Array.of(0x03, name.length, ...name);
  }
  return Uint8Array.of(0x05, 0x01, 0x00, ...address, port >> 8, port & 0xff);
}

/**
 * The RFC 1929 sub-negotiation request.
 *
 * @throws {RangeError} when the username or the password is longer than 255 bytes
 */
export function encodeAuth(username: string, password: string): Uint8Array {
  const user = encoder.encode(username);
  const pass = encoder.encode(password);
  if (user.length > 255 || pass.length > 255) {
    throw new RangeError("SOCKS username and password are at most 255 bytes each");
  }
  return Uint8Array.of(0x01, user.length, ...user, pass.length, ...pass);
}

/** The BND.ADDR of a complete CONNECT reply, as text (a name as sent). */
export function boundAddress(reply: Uint8Array): string {
  const atyp = reply[3];
  if (atyp === 0x01) return Array.from(reply.subarray(4, 8)).join(".");
  if (atyp === 0x04) {
    const words: string[] = [];
    for (let i = 4; i < 20; i += 2) words.push(((reply[i] << 8) | reply[i + 1]).toString(16));
    return words.join(":");
  }
  return new TextDecoder().decode(reply.subarray(5, 5 + reply[4]));
}

/** Bytes the CONNECT reply needs before its address ends, or `undefined` for an unknown ATYP. */
export function replyLength(atyp: number, buffer: Uint8Array): number | undefined {
  if (atyp === 0x01) return 4 + 4 + 2;
  if (atyp === 0x04) return 4 + 16 + 2;
  if (atyp === 0x03) return buffer.length < 5 ? 5 : 4 + 1 + buffer[4] + 2;
  return undefined;
}
