import assert from "node:assert/strict";
import { DEBUG_SIGNAL_STATUS, stopOnDebugSignal } from "../src/boot/debug_signal.ts";
import { freePorts, Gateway, proofConfig, writeConfig } from "./fixtures/gateway.ts";

/** Deno installs its own SIGUSR1 handler (the inspector's) this long after start. */
const RUNTIME_HANDLER_MS = 500;

Deno.test("a gateway under its derived flags stops at once on SIGUSR1 and says why", async () => {
  const [publicPort, localPort, providerPort] = freePorts(3);
  const ports = { public: publicPort, local_health: localPort, provider_health: providerPort };
  const gateway = await Gateway.start(await writeConfig(proofConfig(ports)), ports);
  try {
    // After the runtime's own handler is in place, so the inspector would open on this signal.
    await new Promise((resolve) => setTimeout(resolve, RUNTIME_HANDLER_MS * 2));
    // No drain: the lame-duck window (5 s) would keep a debugger open that long.
    let timer: ReturnType<typeof setTimeout> | undefined;
    const late = new Promise<undefined>((resolve) =>
      timer = setTimeout(() => resolve(undefined), 4000)
    );
    const status = await Promise.race([gateway.stop("SIGUSR1"), late]);
    clearTimeout(timer);
    assert.ok(status, `still running 4 s after SIGUSR1:\n${gateway.stderr}`);
    assert.equal(status.code, DEBUG_SIGNAL_STATUS, gateway.stderr);
    assert.match(gateway.stderr, /SIGUSR1 received: Deno opens a debugger on 127\.0\.0\.1:9229/);
    assert.doesNotMatch(gateway.stderr, /draining/);
  } finally {
    await gateway.dispose();
  }
});

Deno.test("stopOnDebugSignal() logs once and exits with its status; the remover takes it back", () => {
  const lines: string[] = [];
  const exits: number[] = [];
  const remove = stopOnDebugSignal({ log: (line) => lines.push(line), exit: (s) => exits.push(s) });
  remove();
  assert.deepEqual([lines, exits], [[], []]);
});
