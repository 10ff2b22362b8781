/**
 * The hub's view of each node's standing (src/hub/node_standing.ts), on a real CA folder: what the
 * relay and the tunnel ask (`admitsTransport`), who is a door and who may follow the door stream,
 * certificates of an earlier incarnation, markers that do not read, and records pruned once
 * expired beyond the grace.
 */
import assert from "node:assert/strict";
import { type CaFiles, initCa, type Issuer, loadIssuer, signNodeCsr } from "../src/trust/ca.ts";
import { makeNodeKeyAndCsr } from "../src/trust/csr.ts";
import { writeNodeEntry, writeRevokedMarker } from "../src/trust/node_registry.ts";
import { NodeStanding, PRUNE_GRACE_MS } from "../src/hub/node_standing.ts";

const DAY_MS = 86_400_000;

async function freshCa(): Promise<{ issuer: Issuer; files: CaFiles; dispose(): Promise<void> }> {
  const dir = await Deno.makeTempDir({ prefix: "portcullis-standing-" });
  await initCa(`${dir}/ca`, { names: ["127.0.0.1"] });
  const issuer = await loadIssuer(`${dir}/ca`);
  return { issuer, files: issuer.files, dispose: () => Deno.remove(dir, { recursive: true }) };
}

/** Registers `nodeId` as `type` in `incarnation` and issues it a certificate: its serial. */
async function register(
  issuer: Issuer,
  nodeId: string,
  type: "edge" | "door",
  incarnation = 1,
  now = new Date(),
): Promise<string> {
  await writeNodeEntry(issuer.files.nodesDir, {
    nodeId,
    nodeType: type,
    incarnation,
    registeredAt: now.toISOString(),
  });
  const { csrPem } = await makeNodeKeyAndCsr(nodeId);
  const signed = await signNodeCsr(issuer, {
    csrPem,
    nodeId,
    nodeType: type,
    incarnation,
    lifetimeDays: 1,
    now,
  });
  if (!signed.ok) throw new Error(signed.detail);
  return signed.serial;
}

Deno.test("NodeStanding.admitsTransport(): an active edge's current certificate only", async () => {
  const { issuer, files, dispose } = await freshCa();
  try {
    const edge = await register(issuer, "edge-1", "edge");
    const door = await register(issuer, "door-1", "door");
    const listed = await register(issuer, "edge-listed", "edge");
    const gone = await register(issuer, "edge-gone", "edge");
    const old = await register(issuer, "edge-again", "edge", 1);
    const current = await register(issuer, "edge-again", "edge", 2);
    const listedInCrl = await register(issuer, "edge-crl", "edge");
    await writeRevokedMarker(files.revokedDir, {
      nodeId: "edge-gone",
      incarnation: 1,
      revokedAt: new Date().toISOString(),
    });
    const standing = new NodeStanding({
      files,
      doorList: ["edge-listed"],
      crl: { isRevoked: (serial) => serial === listedInCrl },
      log: () => {},
    });
    await standing.look();
    const admits = (node: string, serial: string) => standing.admitsTransport(node, serial);
    assert.equal(await admits("edge-1", edge), true);
    assert.equal(await admits("door-1", door), false, "a door");
    assert.equal(await admits("edge-listed", listed), false, "listed in doors.nodes");
    assert.equal(await admits("edge-gone", gone), false, "revoked");
    assert.equal(await admits("edge-again", old), false, "an earlier incarnation");
    assert.equal(await admits("edge-again", current), true);
    assert.equal(await admits("edge-crl", listedInCrl), false, "in the CRL");
    assert.equal(await admits("edge-1", "7f".repeat(16)), false, "a serial never issued");
    assert.equal(await admits("edge-1", door), false, "another node's serial");
    assert.equal(await admits("edge-9", edge), false, "not registered");
    assert.equal(await admits("edge-1", ""), false);
    // Without the CA (token nodes): doors.nodes is all the hub knows.
    const tokens = new NodeStanding({
      doorList: ["door-1"],
      crl: { isRevoked: () => false },
      log() {},
    });
    assert.equal(await tokens.admitsTransport("edge-1", "0a"), true);
    assert.equal(await tokens.admitsTransport("door-1", "0a"), false);
    assert.deepEqual(
      ["door-1", "edge-1"].map((node) => [tokens.isDoor(node), tokens.mayFollowDoors(node)]),
      [[true, true], [false, false]],
    );
  } finally {
    await dispose();
  }
});

Deno.test("NodeStanding: a door by the CA or by doors.nodes; the door stream for a CA door, listed when a list is set", async () => {
  const { issuer, files, dispose } = await freshCa();
  try {
    await register(issuer, "door-1", "door");
    await register(issuer, "door-2", "door");
    await register(issuer, "edge-1", "edge");
    await register(issuer, "edge-2", "edge");
    const roles = async (doorList?: string[]) => {
      const standing = new NodeStanding({
        files,
        doorList,
        crl: { isRevoked: () => false },
        log() {},
      });
      await standing.look();
      return ["door-1", "door-2", "edge-1", "edge-2", "never"].map((node) =>
        `${node}:${standing.isDoor(node) ? "door" : "-"}:${
          standing.mayFollowDoors(node) ? "stream" : "-"
        }`
      );
    };
    assert.deepEqual(await roles(), [
      "door-1:door:stream",
      "door-2:door:stream",
      "edge-1:-:-",
      "edge-2:-:-",
      "never:-:-",
    ]);
    assert.deepEqual(await roles(["door-1", "edge-1", "never"]), [
      "door-1:door:stream",
      "door-2:door:-",
      "edge-1:door:-",
      "edge-2:-:-",
      "never:door:-",
    ]);
  } finally {
    await dispose();
  }
});

Deno.test("NodeStanding: a marker that does not read revokes (fail closed), a look sees a new marker", async () => {
  const { issuer, files, dispose } = await freshCa();
  try {
    const serial = await register(issuer, "edge-1", "edge");
    const lines: string[] = [];
    const standing = new NodeStanding({
      files,
      crl: { isRevoked: () => false },
      log: (l) => lines.push(l),
    });
    await standing.look();
    assert.equal(await standing.judge("edge-1", serial), "ok");
    await Deno.writeTextFile(`${files.revokedDir}/edge-1.json`, "{not json", { mode: 0o600 });
    assert.equal(await standing.judge("edge-1", serial), "ok", "not seen before the look");
    await standing.look();
    assert.equal(await standing.judge("edge-1", serial), "revoked");
    assert.ok(lines.some((l) => l.includes("revoked/edge-1.json")), lines.join("\n"));
    await writeRevokedMarker(files.revokedDir, {
      nodeId: "edge-1",
      incarnation: 1,
      revokedAt: new Date().toISOString(),
    });
    await standing.look();
    assert.equal(await standing.judge("edge-1", serial), "revoked");
    // Re-provisioned: incarnation 2 is not revoked by the marker of 1; the old serial stays dead.
    const fresh = await register(issuer, "edge-1", "edge", 2);
    await standing.look();
    assert.equal(await standing.judge("edge-1", fresh), "ok");
    assert.equal(await standing.judge("edge-1", serial), "revoked");
  } finally {
    await dispose();
  }
});

Deno.test("NodeStanding: records expired beyond the grace are pruned at a look and at the next issue", async () => {
  const { issuer, files, dispose } = await freshCa();
  try {
    const long = new Date(Date.now() - 3 * DAY_MS); // a 1-day certificate: expired 2 days ago
    const expired = await register(issuer, "edge-1", "edge", 1, long);
    const recent = new Date(Date.now() - DAY_MS - 60_000); // expired a minute ago: kept
    const graced = await register(issuer, "edge-1", "edge", 1, recent);
    const live = await register(issuer, "edge-1", "edge", 1);
    const folder = `${files.issuedDir}/edge-1`;
    const names = () => [...Deno.readDirSync(folder)].map((e) => e.name).sort();
    assert.equal(names().length, 3);
    let now = Date.now();
    const standing = new NodeStanding({
      files,
      crl: { isRevoked: () => false },
      log() {},
      now: () => now,
    });
    await standing.look();
    assert.deepEqual(names(), [`${graced}.json`, `${live}.json`].sort());
    assert.equal(await standing.judge("edge-1", expired), "unknown");
    // A day on, the graced one goes at the next issue.
    now += PRUNE_GRACE_MS;
    await standing.noteIssue(
      { nodeId: "edge-1", nodeType: "edge", incarnation: 1, registeredAt: recent.toISOString() },
      { serial: live, notAfter: new Date(Date.now() + DAY_MS), issuedAt: new Date() },
    );
    assert.deepEqual(names(), [`${live}.json`]);
  } finally {
    await dispose();
  }
});
