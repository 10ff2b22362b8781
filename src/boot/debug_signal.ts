/**
 * SIGUSR1 ends a running server at once.
 *
 * Why: since Deno 2.9.2, a process that receives SIGUSR1 starts a V8 inspector on
 * `127.0.0.1:9229`, Node's convention for attaching a debugger to a running process (measured on
 * 2.9.6: under the gateway's derived flags, with no `--allow-net` for that port and no `--inspect`,
 * `ss -ltn` shows the inspector listening 1 s after the signal). The inspector answers any local
 * user who connects, and a debugger runs code inside the process — with its keys, its ledger and
 * its grants, past every permission flag. A listener of our own does not stop the runtime's
 * (they run side by side), the signal cannot be ignored from inside (the runtime installs its own
 * handler over an inherited `SIG_IGN`), and no Deno flag turns it off. A signal mask inherited from
 * the parent does stop it (a blocked SIGUSR1 is never delivered), and so does a bind the inspector
 * cannot make (the systemd units `scripts/unit.ts` writes allow binds on the config's own ports
 * only); where neither holds, stopping the process is the only way to close the inspector.
 *
 * So a server that receives SIGUSR1 says why on stderr and exits with status
 * {@link DEBUG_SIGNAL_STATUS} without draining: a drain would keep the inspector open for up to
 * its timeout. A supervisor restarts it; the line tells the operator which tool sent the signal
 * (log-rotation setups often do: Portcullis logs to stdout and stderr and has nothing to reopen).
 *
 * @module
 */
import { flushStandardOutlets } from "../observe/log_outlet.ts";

/** The exit status of a server stopped by SIGUSR1. */
export const DEBUG_SIGNAL_STATUS = 4;

/** What {@link stopOnDebugSignal} needs: where to say why, and how to end the process. */
export interface DebugSignalOptions {
  /** Writes one diagnostic sentence (the caller's log). */
  readonly log: (line: string) => void;
  /** Ends the process (default: the log lines queued get 200 ms to leave, then `Deno.exit`). */
  readonly exit?: (status: number) => void;
}

/**
 * Makes SIGUSR1 end this process at once with {@link DEBUG_SIGNAL_STATUS}.
 *
 * @param options the log and the exit
 * @returns a function that removes the listener
 */
export function stopOnDebugSignal(options: DebugSignalOptions): () => void {
  const exit = options.exit ??
    ((status: number) => void flushStandardOutlets(200).finally(() => Deno.exit(status)));
  const stop = function stopOnSigusr1(): void {
    options.log(
      "portcullis: error: SIGUSR1 received: Deno opens a debugger on 127.0.0.1:9229 on this " +
        "signal, which any local user could use to run code in this process; stopping now " +
        `(exit status ${DEBUG_SIGNAL_STATUS}). Do not send SIGUSR1 to Portcullis (log ` +
        "rotation has nothing to reopen: logs go to stdout and stderr)",
    );
    exit(DEBUG_SIGNAL_STATUS);
  };
  Deno.addSignalListener("SIGUSR1", stop);
  return () => Deno.removeSignalListener("SIGUSR1", stop);
}
