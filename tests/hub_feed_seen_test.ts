/**
 * The hub's config stream and its view of a node when the node names a set it received but does
 * not serve (`seen`): the hub holds such a poll while that is its live set and answers `current`,
 * never the set again, and its view of the node keeps `have` — what the node serves — so the node
 * is not shown current (issue 32). An in-process hub, polled over HTTP with a node's token.
 *
 * @module
 */
import assert from "node:assert/strict";
import { startTestHub, type TestHub } from "./fixtures/hub_in_process.ts";
import { waitFor } from "./fixtures/in_process.ts";

interface Answer {
  readonly type: string;
  readonly hash: string;
}

interface NodeView {
  readonly node_id: string;
  readonly have: string;
  readonly seen: string;
  readonly current: boolean;
}

/** One poll of `edge-a` with `query` (after `node_id`); status and parsed body. */
async function poll(hub: TestHub, token: string, query: string): Promise<Answer> {
  const url = new URL(`/v1/config/stream?node_id=edge-a&${query}`, hub.url);
  const response = await fetch(url, { headers: { authorization: `Bearer ${token}` } });
  assert.equal(response.status, 200);
  return await response.json();
}

/** The hub's `/v1/config` view of `edge-a`. */
async function nodeView(hub: TestHub): Promise<NodeView | undefined> {
  const response = await fetch(`http://127.0.0.1:${hub.healthPort}/v1/config`);
  const body = await response.json();
  return (body.nodes as NodeView[]).find((node) => node.node_id === "edge-a");
}

/** An old set's hash: one the hub never had (its answer is then a snapshot). */
const OLD = "0".repeat(64);

Deno.test("hub stream: a poll whose seen is the live set is answered current, not sent the set", async () => {
  const hub = await startTestHub();
  try {
    const token = await hub.token("edge-a");
    const live = hub.hub.store.current.hash;
    const answer = await poll(hub, token, `have=${OLD}&seen=${live}&wait=0`);
    assert.deepEqual([answer.type, answer.hash], ["current", live]);
    const node = await nodeView(hub);
    assert.deepEqual(
      [node?.have, node?.seen, node?.current],
      [OLD, live, false],
      "the node serves its old set: the hub does not call it current",
    );
    // A seen set that is not the live one changes nothing: the node gets the live set.
    assert.equal(
      (await poll(hub, token, `have=${OLD}&seen=${"1".repeat(64)}&wait=0`)).type,
      "snapshot",
    );
    assert.equal((await poll(hub, token, `have=${OLD}&wait=0`)).type, "snapshot");
    // Serving the live set is current.
    await poll(hub, token, `have=${live}&wait=0`);
    assert.equal((await nodeView(hub))?.current, true);
  } finally {
    await hub.dispose();
  }
});

Deno.test("hub stream: a poll whose seen is the live set is held, and answered with a new set at once", async () => {
  const hub = await startTestHub({ edit: (config) => config.stream = { hold_ms: 20_000 } });
  try {
    const token = await hub.token("edge-a");
    const live = hub.hub.store.current.hash;
    const held = poll(hub, token, `have=${OLD}&seen=${live}`);
    await waitFor(() => Promise.resolve(hub.hub.feed.waiting), (n) => n === 1, 5000);
    await hub.write("more.test.yaml", "host: more.test\nroutes: []\n");
    const answer = await held;
    assert.equal(answer.type, "snapshot", "a change ends the hold with the new set");
    assert.notEqual(answer.hash, live);
  } finally {
    await hub.dispose();
  }
});
