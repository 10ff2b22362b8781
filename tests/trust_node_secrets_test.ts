/**
 * One-time registration secrets (src/trust/node_secrets.ts): the right secret registers its node
 * once — also when two requests race — and every other request (wrong secret, unknown or malformed
 * node, a used secret, a file group or others may read) is refused alike.
 *
 * @module
 */
import assert from "node:assert/strict";
import { addNodeSecret, NodeSecrets, readNodeSecretFile } from "../src/trust/node_secrets.ts";

async function secretsDir(): Promise<{ dir: string; dispose(): Promise<void> }> {
  const dir = await Deno.makeTempDir({ prefix: "portcullis-secrets-" });
  return { dir, dispose: () => Deno.remove(dir, { recursive: true }) };
}

function namesIn(dir: string): string[] {
  return [...Deno.readDirSync(dir)].map((entry) => entry.name).sort();
}

Deno.test("addNodeSecret() writes a 0600 JSON secret once per node and refuses a malformed id", async () => {
  const { dir, dispose } = await secretsDir();
  try {
    const made = await addNodeSecret(dir, "edge-1", "edge");
    assert.equal(made.file, `${dir}/edge-1.secret`);
    assert.match(made.secret, /^[A-Za-z0-9_-]{43}$/);
    assert.equal(Deno.statSync(made.file).mode! & 0o777, 0o600);
    const json = JSON.parse(await Deno.readTextFile(made.file));
    assert.deepEqual(Object.keys(json).sort(), [
      "created_at",
      "incarnation",
      "node_id",
      "node_type",
      "secret",
    ]);
    assert.deepEqual([json.node_id, json.node_type, json.secret, json.incarnation], [
      "edge-1",
      "edge",
      made.secret,
      1,
    ]);
    assert.ok(!Number.isNaN(Date.parse(json.created_at)));
    assert.deepEqual(await readNodeSecretFile(made.file), {
      nodeId: "edge-1",
      nodeType: "edge",
      secret: made.secret,
      incarnation: 1,
      createdAt: new Date(json.created_at),
    });

    await assert.rejects(
      () => addNodeSecret(dir, "edge-1", "door"),
      (error: Error) => error.message.startsWith(`File "${made.file}" holds a secret`),
    );
    assert.equal(JSON.parse(await Deno.readTextFile(made.file)).secret, made.secret);
    for (const bad of ["", "../edge", "edge 1", "-edge", "a".repeat(64), "edge/1"]) {
      await assert.rejects(() => addNodeSecret(dir, bad, "edge"), RangeError, bad);
    }
    assert.deepEqual(namesIn(dir), ["edge-1.secret"]);
  } finally {
    await dispose();
  }
});

Deno.test("readNodeSecretFile() names the file and the field when it is malformed or exposed", async () => {
  const { dir, dispose } = await secretsDir();
  try {
    const path = `${dir}/node.secret`;
    const cases: [string, string][] = [
      ["{", `Node secret file "${path}" is not JSON`],
      ["[]", `Node secret file "${path}" has no valid field "node_id"`],
      [
        `{"node_id":"e","node_type":"edge"}`,
        `Node secret file "${path}" has no valid field "secret"`,
      ],
      [`{"node_id":"e","secret":"${"x".repeat(43)}"}`, `has no valid field "node_type"`],
    ];
    for (const [text, message] of cases) {
      await Deno.writeTextFile(path, text, { mode: 0o600 });
      await assert.rejects(
        () => readNodeSecretFile(path),
        (e: Error) => e.message.includes(message),
      );
    }
    await Deno.chmod(path, 0o644);
    await assert.rejects(
      () => readNodeSecretFile(path),
      (error: Error) => error.message.includes(path) && error.message.includes("0644"),
    );
  } finally {
    await dispose();
  }
});

Deno.test("NodeSecrets.consume(): the right secret once; wrong, unknown, malformed and reused refused", async () => {
  const { dir, dispose } = await secretsDir();
  try {
    const edge = await addNodeSecret(dir, "edge-1", "edge");
    const door = await addNodeSecret(dir, "door-1", "door");
    const secrets = new NodeSecrets(dir);
    const wrong = edge.secret.slice(0, -1) + (edge.secret.endsWith("A") ? "B" : "A");
    assert.deepEqual(
      {
        wrong: await secrets.consume("edge-1", wrong),
        otherNodes: await secrets.consume("edge-1", door.secret),
        unknown: await secrets.consume("edge-2", edge.secret),
        malformed: await secrets.consume("../edge-1", edge.secret),
        empty: await secrets.consume("edge-1", ""),
        long: await secrets.consume("edge-1", edge.secret + "x".repeat(2000)),
      },
      {
        wrong: { ok: false },
        otherNodes: { ok: false },
        unknown: { ok: false },
        malformed: { ok: false },
        empty: { ok: false },
        long: { ok: false },
      },
    );
    assert.deepEqual(await secrets.consume("edge-1", edge.secret), {
      ok: true,
      nodeType: "edge",
      incarnation: 1,
    });
    assert.deepEqual(await secrets.consume("edge-1", edge.secret), { ok: false });
    assert.deepEqual(await new NodeSecrets(dir).consume("edge-1", edge.secret), { ok: false });
    assert.deepEqual(await secrets.consume("door-1", door.secret), {
      ok: true,
      nodeType: "door",
      incarnation: 1,
    });
    assert.deepEqual(namesIn(dir), []);

    const again = await addNodeSecret(dir, "edge-1", "edge");
    assert.notEqual(again.secret, edge.secret);
    assert.deepEqual(await secrets.consume("edge-1", edge.secret), { ok: false });
    assert.deepEqual(await secrets.consume("edge-1", again.secret), {
      ok: true,
      nodeType: "edge",
      incarnation: 1,
    });
  } finally {
    await dispose();
  }
});

Deno.test("NodeSecrets.consume(): a secret file group or others may read registers nobody, logged once", async () => {
  const { dir, dispose } = await secretsDir();
  try {
    const made = await addNodeSecret(dir, "edge-1", "edge");
    await Deno.chmod(made.file, 0o640);
    const lines: string[] = [];
    const secrets = new NodeSecrets(dir, { log: (line) => lines.push(line) });
    assert.deepEqual(await secrets.consume("edge-1", made.secret), { ok: false });
    assert.deepEqual(await secrets.consume("edge-1", made.secret), { ok: false });
    assert.equal(lines.length, 1);
    assert.match(lines[0], /edge-1\.secret.*0640.*node "edge-1" cannot register/);
    assert.deepEqual(namesIn(dir), ["edge-1.secret"]);

    await Deno.chmod(made.file, 0o600);
    assert.deepEqual(await secrets.consume("edge-1", made.secret), {
      ok: true,
      nodeType: "edge",
      incarnation: 1,
    });

    const renamed = await addNodeSecret(dir, "edge-2", "edge");
    await Deno.rename(renamed.file, `${dir}/edge-3.secret`);
    assert.deepEqual(await secrets.consume("edge-3", renamed.secret), { ok: false });
    assert.deepEqual(await secrets.consume("edge-2", renamed.secret), { ok: false });
  } finally {
    await dispose();
  }
});

Deno.test("NodeSecrets.consume(): of concurrent calls with the right secret exactly one succeeds", async () => {
  const { dir, dispose } = await secretsDir();
  try {
    for (let round = 0; round < 20; round++) {
      const made = await addNodeSecret(dir, "edge-1", "edge");
      const one = new NodeSecrets(dir);
      const two = new NodeSecrets(dir);
      const results = await Promise.all([
        one.consume("edge-1", made.secret),
        two.consume("edge-1", made.secret),
        one.consume("edge-1", made.secret),
        two.consume("edge-1", made.secret),
      ]);
      assert.equal(results.filter((result) => result.ok).length, 1, `round ${round}`);
      assert.deepEqual(namesIn(dir), []);
    }
  } finally {
    await dispose();
  }
});
