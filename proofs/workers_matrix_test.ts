/**
 * The proof matrix again with two request workers: every proof file (`p*_test.ts`) runs in a child
 * `deno test` with `PORTCULLIS_TEST_WORKERS=2`, so each gateway it boots serves every lane from two
 * isolates over one shared ledger. This test passes only when every proof passes there too.
 *
 * @module
 */
import assert from "node:assert/strict";

const HERE = new URL("./", import.meta.url).pathname;

Deno.test("proof matrix with 2 request workers: every proof holds", async () => {
  const files: string[] = [];
  for await (const entry of Deno.readDir(HERE)) {
    if (/^p\d+_.*_test\.ts$/.test(entry.name)) files.push(`${HERE}${entry.name}`);
  }
  files.sort();
  assert.ok(files.length >= 10, `found ${files.length} proof files`);
  const output = await new Deno.Command(Deno.execPath(), {
    args: [
      "test",
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
  }).output();
  const text = new TextDecoder().decode(output.stdout) + new TextDecoder().decode(output.stderr);
  const summary = /^(ok|FAILED) \| (\d+) passed.*\| (\d+) failed/m.exec(text);
  const failures = text.split("\n").filter((line) => / \.\.\. FAILED/.test(line));
  assert.ok(summary, `no summary from the child run:\n${text.slice(-3000)}`);
  assert.equal(Number(summary[3]), 0, `failed with 2 workers:\n${failures.join("\n")}`);
  assert.ok(Number(summary[2]) >= 20, `only ${summary[2]} proofs ran`);
  assert.equal(output.code, 0);
});
