/**
 * Field schemas shared by the bootstrap and tenant files.
 *
 * @module
 */
import { isIP } from "node:net";
import * as v from "valibot";

/** A whole number from `min` to `max`. */
export function wholeNumber(
  min: number,
  max = 0x7fffffff,
  what = "a whole number",
): v.GenericSchema<number> {
  return v.pipe(
    v.number(`Expected ${what}`),
    v.integer(`Expected ${what}`),
    v.minValue(min, `Expected ${what} from ${min} to ${max}`),
    v.maxValue(max, `Expected ${what} from ${min} to ${max}`),
  );
}

/** A TCP port, 1–65535. */
export const Port: v.GenericSchema<number> = wholeNumber(1, 65535, "a port number");

/** An IPv4 or IPv6 address literal (names are refused: `localhost` may mean two addresses). */
export const IpLiteral: v.GenericSchema<string> = v.pipe(
  v.string("Expected an IP address"),
  v.check(
    (text) => isIP(text) !== 0,
    "Expected an IP address literal such as 127.0.0.1 or ::1 (a name like localhost is ambiguous)",
  ),
  v.check(
    (text) => isIP(text) === 0 || !text.includes("%"),
    "An IPv6 zone index (such as %eth0) cannot be used in a listener address",
  ),
);

/** A Unix socket path that a `--allow-net=unix:` flag can express. */
export const SocketPath: v.GenericSchema<string> = v.pipe(
  v.string("Expected a path"),
  v.minLength(1, "Expected a non-empty path"),
  v.check((text) => !/[,\0\n]/.test(text), "A socket path cannot hold a comma, NUL or newline"),
);

/** A non-empty string. */
export const Text: v.GenericSchema<string> = v.pipe(
  v.string("Expected text"),
  v.minLength(1, "Expected non-empty text"),
);

/**
 * A `WWW-Authenticate` realm (RFC 9110 §11.5): printable text without `"` or `\`, so it is written
 * as a quoted-string as is. Where it is left out, a challenge carries no realm at all.
 */
export const Realm: v.GenericSchema<string> = v.pipe(
  v.string("Expected a realm"),
  v.regex(
    /^[\x20\x21\x23-\x5b\x5d-\x7e]{1,64}$/,
    'Expected 1-64 printable characters without " or \\',
  ),
);

/**
 * ALPN protocol ids a TLS client offers or a server selects (RFC 7301 §3.1): each 1–255 printable
 * characters without spaces, each once, at most 8. Empty: no ALPN at all.
 */
export const AlpnProtocols: v.GenericSchema<string[]> = v.pipe(
  v.array(
    v.pipe(
      v.string("Expected an ALPN protocol id"),
      v.regex(/^[\x21-\x7e]{1,255}$/, "Expected 1-255 printable characters without spaces"),
    ),
    "Expected a list of ALPN protocol ids, e.g. [http/1.1]",
  ),
  v.maxLength(8, "Expected at most 8 ALPN protocol ids"),
  v.check((ids) => new Set(ids).size === ids.length, "Each ALPN protocol id may appear once"),
);
