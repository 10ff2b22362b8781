/**
 * The two checks the supervisor makes of an instance: a control probe (how far Tor has
 * bootstrapped, whether a circuit is established) and a SOCKS check (does the port accept a TCP
 * connection at all — a refusal, unlike a slow answer, means nothing listens there).
 *
 * A probe opens its own control connection each time: a connection kept open would hide a control
 * port that stopped accepting, and Tor logs one notice line per connection, every 30 s by default.
 *
 * @module
 */
import { connect } from "node:net";
import { ControlConnection, ControlError, getinfoValues, keywordArgs } from "./control.ts";

/** What a control probe learnt. */
export interface TorStatus {
  /** Bootstrap progress, 0–100. */
  readonly progress: number;
  /** The bootstrap phase's tag and summary (`handshake`, "Handshaking with a relay"). */
  readonly tag?: string;
  readonly summary?: string;
  /** Tor has built at least one circuit and can carry streams. */
  readonly circuitEstablished: boolean;
  /** How long the GETINFO exchange took. */
  readonly latencyMs: number;
}

/** Where and how to probe. */
export interface ProbeOptions {
  readonly host: string;
  readonly port: number;
  /** The cookie file the instance's torrc names (not the path a reply claims). */
  readonly cookieFile: string;
  /** The bound on connecting and on each exchange. */
  readonly timeoutMs: number;
}

/**
 * Probes one instance: PROTOCOLINFO, AUTHENTICATE with the cookie, then GETINFO
 * `status/bootstrap-phase` and `status/circuit-established`.
 *
 * @throws {ControlError} when any step fails or is late
 */
export async function probeTor(options: ProbeOptions): Promise<TorStatus> {
  const connection = await ControlConnection.open(options);
  try {
    await authenticate(connection, options.cookieFile);
    const started = performance.now();
    const reply = await connection.exchange(
      "GETINFO status/bootstrap-phase status/circuit-established",
    );
    const latencyMs = performance.now() - started;
    const values = getinfoValues(reply);
    const phase = keywordArgs(values.get("status/bootstrap-phase") ?? "");
    const progress = Number(phase.get("PROGRESS"));
    if (!Number.isInteger(progress) || progress < 0 || progress > 100) {
      throw new ControlError("GETINFO status/bootstrap-phase carried no PROGRESS");
    }
    return {
      progress,
      tag: phase.get("TAG"),
      summary: phase.get("SUMMARY"),
      circuitEstablished: values.get("status/circuit-established") === "1",
      latencyMs,
    };
  } finally {
    connection.close();
  }
}

/**
 * PROTOCOLINFO, then AUTHENTICATE with the cookie in `cookieFile` (the file the instance's torrc
 * names, never the path a reply claims).
 *
 * @throws {ControlError} when Tor offers no cookie authentication or refuses the cookie
 */
export async function authenticate(
  connection: ControlConnection,
  cookieFile: string,
): Promise<void> {
  const info = await connection.exchange("PROTOCOLINFO 1");
  const auth = info.lines.find((line) => line.text.startsWith("AUTH "));
  const methods = keywordArgs(auth?.text ?? "").get("METHODS")?.split(",") ?? [];
  if (!methods.includes("COOKIE")) {
    throw new ControlError(`Tor offers no cookie authentication (METHODS=${methods.join(",")})`);
  }
  const cookie = await readCookie(cookieFile);
  await connection.exchange(`AUTHENTICATE ${encodeHex(cookie)}`);
}

/** The cookie Tor wrote (32 bytes); a missing or short file is a failed probe. */
async function readCookie(path: string): Promise<Uint8Array> {
  let cookie: Uint8Array;
  try {
    cookie = await Deno.readFile(path);
  } catch (error) {
    throw new ControlError(`Cannot read the control cookie: ${(error as Error).name}`);
  }
  if (cookie.length !== 32) {
    throw new ControlError(`The control cookie has ${cookie.length} bytes, not 32`);
  }
  return cookie;
}

/** Lower-case hex, as AUTHENTICATE takes a cookie. */
function encodeHex(bytes: Uint8Array): string {
  return Array.from(bytes, (byte) => byte.toString(16).padStart(2, "0")).join("");
}

/** What a SOCKS check saw: the port accepted, refused, or neither (a timeout or another error). */
export type SocksCheck = "accepted" | "refused" | "inconclusive";

/**
 * Opens and closes one TCP connection to a SOCKS port (no SOCKS bytes are sent).
 *
 * @param host the listen address
 * @param port the SOCKS port
 * @param timeoutMs how long a connect may take before it counts as `inconclusive` (not a refusal)
 */
export function checkSocks(host: string, port: number, timeoutMs: number): Promise<SocksCheck> {
  return new Promise((resolve) => {
    const socket = connect({ host, port });
    const done = (result: SocksCheck) => {
      clearTimeout(timer);
      socket.removeAllListeners();
      socket.on("error", () => {});
      socket.destroy();
      resolve(result);
    };
    const timer = setTimeout(() => done("inconclusive"), timeoutMs);
    socket.once("connect", () => done("accepted"));
    socket.once(
      "error",
      (error: NodeJS.ErrnoException) =>
        done(error.code === "ECONNREFUSED" ? "refused" : "inconclusive"),
    );
  });
}
