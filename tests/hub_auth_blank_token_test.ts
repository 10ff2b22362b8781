/**
 * Rule 2 of issue 33, for the hub's token authentication (src/hub/auth.ts, src/hub/api_auth.ts): a
 * node whose token file on the hub is blank (empty, or only whitespace and newlines) authenticates
 * nobody — not a caller that sends no `Authorization` header, not `Bearer ` with an empty token,
 * not any token at all. A blank file is what an interrupted provisioning or a truncating editor
 * leaves; read as the empty token, it would let anyone claim that node's id.
 *
 * Against a real hub under its derived flags, each spelling of "no token" and a few tokens, with a
 * node that has a real token as the other side; and the token book's own contract in process,
 * where the empty token can be asked directly (the api's bearer parsing refuses it before the book
 * is asked, so only the unit shows the book never holds it).
 *
 * @module
 */
import assert from "node:assert/strict";
import type { IncomingMessage } from "node:http";
import { tokenAuth } from "../src/hub/auth.ts";
import { request } from "./fixtures/http_client.ts";
import { runMain } from "./fixtures/gateway.ts";
import { HubProcess } from "./fixtures/hub.ts";

/** Blank token files: each must authenticate nobody. */
const BLANK: Record<string, string> = {
  "edge-empty": "",
  "edge-newline": "\n",
  "edge-spaces": "  \t \r\n\n",
};

/** How a caller can say "no token", and a few tokens that are not the node's. */
function attempts(otherToken: string): [string, [string, string][]][] {
  return [
    ["no Authorization header", []],
    ["Authorization: Bearer with an empty token", [["Authorization", "Bearer "]]],
    ["Authorization: Bearer alone", [["Authorization", "Bearer"]]],
    ["an empty Authorization header", [["Authorization", ""]]],
    ['Authorization: Bearer ""', [["Authorization", 'Bearer ""']]],
    ["Authorization: Basic with empty credentials", [["Authorization", "Basic Og=="]]],
    ["Authorization: Bearer with some token", [["Authorization", "Bearer anything"]]],
    ["Authorization: Bearer =", [["Authorization", "Bearer ="]]],
    ["another node's token", [["Authorization", `Bearer ${otherToken}`]]],
  ];
}

async function poll(hub: HubProcess, node: string, headers: [string, string][]) {
  return await request(hub.apiPort, {
    path: `/v1/config/stream?node_id=${node}&have=&wait=0`,
    headers,
  });
}

/** Writes `text` as `<dir>/<node>.token`, mode 0600 (the hub reads no token others may read). */
async function writeToken(dir: string, node: string, text: string): Promise<void> {
  await Deno.writeTextFile(`${dir}/${node}.token`, text, { mode: 0o600 });
  await Deno.chmod(`${dir}/${node}.token`, 0o600);
}

/** Every attempt not refused as an outsider is (404 `route_not_allowed`), described. */
async function admittedAttempts(hub: HubProcess, nodes: readonly string[], other: string) {
  const problems: string[] = [];
  for (const node of nodes) {
    for (const [how, headers] of attempts(other)) {
      const answer = await poll(hub, node, headers);
      if (answer.status !== 404 || JSON.parse(answer.body).error?.code !== "route_not_allowed") {
        problems.push(`${node}, ${how}: ${answer.status} ${answer.body}`);
      }
    }
  }
  return problems;
}

Deno.test(
  "rule 2: a node whose hub token file is blank is refused without Authorization, with Bearer empty, and with any token (real hub)",
  async () => {
    const hub = await HubProcess.start({ nodes: ["edge-a", "edge-b"] });
    try {
      // The other side: a node with a token gets in with it, and only with it.
      const token = hub.tokenOf("edge-a");
      const admitted = await poll(hub, "edge-a", [["Authorization", `Bearer ${token}`]]);
      assert.equal(admitted.status, 200, admitted.body);
      assert.equal((await poll(hub, "edge-a", [])).status, 404);

      // Blank files appear while the hub runs (`check` and boot refuse them: below): an
      // interrupted provisioning, a truncating editor.
      for (const [node, text] of Object.entries(BLANK)) {
        await writeToken(`${hub.dir}/tokens`, node, text);
      }
      assert.deepEqual(await admittedAttempts(hub, Object.keys(BLANK), token), []);

      // A node's own file blanked in place: nobody gets in as it, and the holder of the token it
      // held is told its token was revoked (the answer only that holder can get).
      const held = hub.tokenOf("edge-b");
      await writeToken(`${hub.dir}/tokens`, "edge-b", "\n");
      const until = Date.now() + 3000;
      let old = await poll(hub, "edge-b", [["Authorization", `Bearer ${held}`]]);
      while (old.status === 200 && Date.now() < until) {
        await new Promise((resolve) => setTimeout(resolve, 100)); // a rewrite in place: ≤ 1 s
        old = await poll(hub, "edge-b", [["Authorization", `Bearer ${held}`]]);
      }
      assert.equal(old.status, 403, old.body);
      assert.equal(JSON.parse(old.body).error.code, "node_revoked");
      assert.deepEqual(await admittedAttempts(hub, ["edge-b"], token), []);

      // And a hub folder holding a blank token file does not pass `check` (so no boot).
      const check = await runMain(["check", hub.config]);
      assert.notEqual(check.code, 0);
      assert.match(check.stderr, /Token file edge-empty\.token is empty/);
    } finally {
      await hub.dispose();
    }
  },
);

Deno.test(
  "rule 2: the token book holds no token for a blank file: the empty token and any other are refused",
  async () => {
    const dir = await Deno.makeTempDir({ prefix: "portcullis-tokens-" });
    try {
      for (const [node, text] of Object.entries({ ...BLANK, "edge-a": "real-token-0123\n" })) {
        await writeToken(dir, node, text);
      }
      const auth = tokenAuth(dir);
      assert.equal((await auth.verify("edge-a", "real-token-0123")).ok, true, "the other side");
      const withHeader = (authorization?: string) =>
        ({ headers: authorization === undefined ? {} : { authorization } }) as IncomingMessage;
      for (const node of Object.keys(BLANK)) {
        for (const token of ["", " ", "\n", "anything", "real-token-0123"]) {
          const result = await auth.verify(node, token);
          assert.equal(result.ok, false, `${node}: token ${JSON.stringify(token)} was accepted`);
        }
        for (const header of [undefined, "", "Bearer", "Bearer ", "Bearer anything"]) {
          const result = await auth(withHeader(header), node);
          assert.equal(result.ok, false, `${node}: Authorization ${JSON.stringify(header)}`);
        }
      }
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
  },
);
