/**
 * Tor processes that die with their supervisor. torspec control-spec §3.23 (TAKEOWNERSHIP): a
 * control connection that sent `TAKEOWNERSHIP` owns the Tor instance, which exits when that
 * connection closes — at once for a client-only Tor (Tor's `connection_control_closed`: "Owning
 * controller connection has closed -- exiting now"). A killed supervisor's connections are closed
 * by the kernel, so its Tors are gone within moments instead of after `__OwningControllerProcess`'s
 * 15-second poll (measured with Debian's tor 0.4.9: see `docs/decisions.md`).
 *
 * The sequence is the spec's: Tor is started with `__OwningControllerProcess` (which covers the
 * moments before its control port answers), the supervisor connects, authenticates, sends
 * `TAKEOWNERSHIP`, then `RESETCONF __OwningControllerProcess` (Tor stops polling the process).
 *
 * A restarted supervisor also meets Tors it did not spawn: one left by a supervisor killed in the
 * moments before it took ownership (or by an older version) still holds the instance's ports and
 * data folder lock. {@link haltLeftover} finds such a Tor on the instance's control port, proves it
 * belongs to this pool's instance by authenticating with the instance's own cookie, and makes it
 * exit (by owning it and letting go) before the new life is spawned.
 *
 * @module
 */
import { ControlConnection, ControlError } from "./control.ts";
import { authenticate } from "./probe.ts";

/** Where an instance's control port is and how to prove ours. */
export interface OwnerOptions {
  readonly host: string;
  readonly port: number;
  readonly cookieFile: string;
  readonly timeoutMs: number;
}

/** The least bound on each exchange of the owning connection. */
const OWNER_EXCHANGE_MS = 2000;

/**
 * Opens a control connection that owns the instance; it must stay open for the instance's life
 * (closing it ends the Tor).
 *
 * @throws {ControlError} when the port does not answer, the cookie is refused or a command fails
 */
export async function takeOwnership(options: OwnerOptions): Promise<ControlConnection> {
  // A late reply fails the connection, and a failed owning connection ends the Tor: give each
  // exchange at least OWNER_EXCHANGE_MS.
  const timeoutMs = Math.max(options.timeoutMs, OWNER_EXCHANGE_MS);
  const connection = await ControlConnection.open({ ...options, timeoutMs });
  try {
    await authenticate(connection, options.cookieFile);
    await connection.exchange("TAKEOWNERSHIP"); // from now on, Tor exits when this closes
    await connection.exchange("RESETCONF __OwningControllerProcess");
    return connection;
  } catch (error) {
    connection.close();
    throw error;
  }
}

/** What {@link haltLeftover} found on an instance's control port. */
export interface Leftover {
  /** `none`: nothing answers; `halted`: our leftover Tor was ended; `foreign`: left alone. */
  readonly found: "none" | "halted" | "foreign";
  /** Why a `foreign` one was left alone. */
  readonly reason?: string;
}

/** The bound on each exchange with a leftover: a Tor that just started answers slowly. */
const LEFTOVER_EXCHANGE_MS = 1000;

/**
 * Ends a Tor left on an instance's control port by an earlier supervisor: it is owned and let go,
 * so it exits; then the port is waited on until it refuses. A port that accepts but is slow to
 * answer (a Tor still starting: 220 ms measured for AUTHENTICATE right after its port opened) is
 * tried again until `waitMs` has passed.
 *
 * @returns `none` when nothing answers, `halted` when our leftover Tor was ended, `foreign` when
 * whatever answers does not take the instance's cookie or never answers (it is left alone)
 */
export async function haltLeftover(options: OwnerOptions, waitMs: number): Promise<Leftover> {
  const deadline = Date.now() + waitMs;
  const timeoutMs = Math.max(options.timeoutMs, LEFTOVER_EXCHANGE_MS);
  for (;;) {
    let connection: ControlConnection;
    try {
      connection = await ControlConnection.open({ ...options, timeoutMs });
    } catch {
      return { found: "none" };
    }
    try {
      await authenticate(connection, options.cookieFile);
      await connection.exchange("TAKEOWNERSHIP");
      break;
    } catch (error) {
      if (!(error instanceof ControlError)) throw error;
      const refused = error.status !== undefined || /cookie/.test(error.message);
      if (refused || Date.now() >= deadline) return { found: "foreign", reason: error.message };
    } finally {
      connection.close();
    }
  }
  while (Date.now() < deadline) {
    try {
      (await ControlConnection.open({ ...options, timeoutMs: 200 })).close();
    } catch {
      break;
    }
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  return { found: "halted" };
}
