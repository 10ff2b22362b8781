/**
 * The hub's tokens folder is read into memory (src/hub/auth.ts), not per request, so node ids do
 * not leak through timing; what an operator does to the folder must still count without a
 * restart: a token file added or removed from the next request, one rewritten in place within a
 * second, one others may read never (and said once in the log).
 *
 * @module
 */
import assert from "node:assert/strict";
import { startTestHub, type TestHub } from "./fixtures/hub_in_process.ts";
import { request } from "./fixtures/http_client.ts";

async function pollStatus(t: TestHub, node: string, token: string): Promise<number> {
  const response = await request(t.apiPort, {
    path: `/v1/config/stream?node_id=${node}&wait=0`,
    headers: [["Authorization", `Bearer ${token}`]],
  });
  return response.status;
}

Deno.test("hub tokens: a token file added, removed, replaced or rewritten in place counts without a restart", async () => {
  const t = await startTestHub();
  const file = `${t.dir}/tokens/edge-a.token`;
  try {
    assert.equal(await pollStatus(t, "edge-a", "first-token"), 404, "no file yet");
    await Deno.writeTextFile(file, "first-token\n", { mode: 0o600 });
    assert.equal(await pollStatus(t, "edge-a", "first-token"), 200, "added");
    await Deno.remove(file);
    // The holder of a removed token is told it is revoked (403 node_revoked, fleet_revocation_test).
    assert.equal(await pollStatus(t, "edge-a", "first-token"), 403, "removed: revoked at once");

    await Deno.writeTextFile(`${file}.new`, "second-token\n", { mode: 0o600 });
    await Deno.rename(`${file}.new`, file);
    assert.equal(await pollStatus(t, "edge-a", "second-token"), 200, "renamed into place");
    assert.equal(await pollStatus(t, "edge-a", "first-token"), 403, "still revoked");
    assert.equal(await pollStatus(t, "edge-a", "never-a-token"), 404, "a guess is not told more");

    // Rewritten in place once the folder has settled: its mtime does not change, so only the
    // read the hub makes at least every second sees it.
    await new Promise((resolve) => setTimeout(resolve, 200));
    assert.equal(await pollStatus(t, "edge-a", "second-token"), 200);
    await Deno.writeTextFile(file, "third-token\n");
    const rewritten = Date.now();
    const until = Date.now() + 3000;
    let status = 0;
    while (status !== 200 && Date.now() < until) {
      status = await pollStatus(t, "edge-a", "third-token");
      if (status !== 200) await new Promise((resolve) => setTimeout(resolve, 100));
    }
    assert.equal(status, 200, "rewritten in place: seen within a second");
    assert.ok(Date.now() - rewritten < 2500, `seen after ${Date.now() - rewritten} ms`);
    assert.equal(await pollStatus(t, "edge-a", "second-token"), 403, "replaced: revoked");
  } finally {
    await t.dispose();
  }
});

Deno.test("hub tokens: a token file group or others may read authenticates nobody, logged once", async () => {
  const t = await startTestHub();
  try {
    await Deno.writeTextFile(`${t.dir}/tokens/edge-b.token`, "open-token\n", { mode: 0o644 });
    await Deno.chmod(`${t.dir}/tokens/edge-b.token`, 0o644);
    for (let i = 0; i < 3; i++) {
      assert.equal(await pollStatus(t, "edge-b", "open-token"), 404);
    }
    const said = t.lines.filter((line) => line.includes("edge-b.token"));
    assert.equal(said.length, 1, t.lines.join("\n"));
    assert.match(said[0], /^portcullis: hub tokens in \S+: File "edge-b\.token" .*0644.*"edge-b"/);
  } finally {
    await t.dispose();
  }
});
