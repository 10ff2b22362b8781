/**
 * The proof matrix again with two request workers: every proof file (`p*_test.ts`) runs in a child
 * `deno test` with `PORTCULLIS_TEST_WORKERS=2`, so each gateway it boots serves every lane from two
 * isolates over one shared ledger (those that fix their gateways' workers themselves run once). This test passes only when every proof passes there too.
 *
 * A failure says why: the child's own error report (each assertion with its message, and the
 * gateway log lines the proofs attach) is part of this test's failure, not just the names of the
 * proofs that failed. The child runs under a generous bound, so a proof that hangs on a loaded
 * machine ends the run with what it printed so far — and the child's whole process tree (every
 * gateway it started) is stopped with it.
 *
 * @module
 */
import assert from "node:assert/strict";

const HERE = new URL("./", import.meta.url).pathname;

/**
 * Proofs whose gateways do not depend on `PORTCULLIS_TEST_WORKERS`, so a second run would prove
 * nothing new: proof 15 sets `workers: 2` on every edge itself, proof 16 runs `workers: 1`, `2` and
 * `shared_event_loop` itself.
 */
const SAME_EITHER_WAY: ReadonlySet<string> = new Set([
  "p15_fleet_budget_test.ts",
  "p16_no_socket_without_owner_test.ts",
]);

/** The whole child run's bound: far above its usual 2–3 minutes on 2 busy cores. */
const LIMIT_MS = 420_000;

/** How much of the child's error report a failure carries. */
const REPORT_CHARS = 40_000;

Deno.test("proof matrix with 2 request workers: every proof holds", async () => {
  const files: string[] = [];
  for await (const entry of Deno.readDir(HERE)) {
    if (!/^p\d+_.*_test\.ts$/.test(entry.name) || SAME_EITHER_WAY.has(entry.name)) continue;
    files.push(`${HERE}${entry.name}`);
  }
  files.sort();
  assert.ok(files.length >= 10, `found ${files.length} proof files`);
  const child = new Deno.Command(Deno.execPath(), {
    args: [
      "test",
      // The run that starts this one type-checked these files already.
      "--no-check",
      "--no-prompt",
      "--allow-run",
      "--allow-read",
      "--allow-write",
      "--allow-net=127.0.0.1,[::1]",
      "--allow-env",
      ...files,
    ],
    env: { NO_COLOR: "1", PORTCULLIS_TEST_WORKERS: "2" },
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  let text = "";
  const collect = async (stream: ReadableStream<Uint8Array>) => {
    for await (const chunk of stream.pipeThrough(new TextDecoderStream())) text += chunk;
  };
  const reading = Promise.all([collect(child.stdout), collect(child.stderr)]);
  let timedOut = false;
  const timer = setTimeout(async () => {
    timedOut = true;
    // The gateways first: once their parent is gone they would be harder to find.
    for (const pid of [...await descendants(child.pid), child.pid]) {
      try {
        Deno.kill(pid, "SIGKILL");
      } catch { /* already gone */ }
    }
  }, LIMIT_MS);
  const status = await child.status;
  clearTimeout(timer);
  await reading;

  const summary = /^(ok|FAILED) \| (\d+) passed.*\| (\d+) failed/m.exec(text);
  const failed = text.split("\n").filter((line) => / \.\.\. FAILED/.test(line));
  const running = text.split("\n").filter((line) => / \.\.\.\s*$/.test(line)).at(-1);
  assert.ok(
    !timedOut,
    `the run with 2 workers did not end within ${LIMIT_MS / 1000} s; still running: ${
      running ?? "?"
    }\n${report(text)}`,
  );
  assert.ok(summary, `no summary from the child run (exit ${status.code}):\n${report(text)}`);
  assert.equal(
    Number(summary[3]),
    0,
    `${summary[3]} proof(s) failed with 2 workers:\n${failed.join("\n")}\n\n${report(text)}`,
  );
  assert.ok(Number(summary[2]) >= 20, `only ${summary[2]} proofs ran`);
  assert.equal(status.code, 0, report(text));
});

/** Every process below `root` (children, their children, …), deepest last. */
async function descendants(root: number): Promise<number[]> {
  const ps = await new Deno.Command("ps", { args: ["-e", "-o", "pid=,ppid="], stdout: "piped" })
    .output();
  const children = new Map<number, number[]>();
  for (const line of new TextDecoder().decode(ps.stdout).split("\n")) {
    const [pid, ppid] = line.trim().split(/\s+/).map(Number);
    if (!pid) continue;
    children.set(ppid, [...children.get(ppid) ?? [], pid]);
  }
  const out: number[] = [];
  const visit = (pid: number) => {
    for (const next of children.get(pid) ?? []) {
      out.push(next);
      visit(next);
    }
  };
  visit(root);
  return out;
}

/** The child's error report (" ERRORS " up to " FAILURES "), or the end of its output. */
function report(text: string): string {
  const start = text.indexOf("\n ERRORS \n");
  const end = text.indexOf("\n FAILURES \n");
  const errors = start === -1
    ? text.slice(-REPORT_CHARS)
    : text.slice(start, end === -1 ? undefined : end);
  return errors.length > REPORT_CHARS
    ? `${errors.slice(0, REPORT_CHARS)}\n… (${errors.length - REPORT_CHARS} more characters)`
    : errors;
}
