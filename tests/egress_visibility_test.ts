/**
 * What an operator sees of the egress during and after an outage: one log line per breaker and
 * negative-cache transition (with the counts that decided it, once per isolate however many
 * shared batches repeat the evidence), `/v1/egress` states named plainly with the failure ratio of
 * the breaker's window (an open instance used to read `error_rate: 0`), and recovery that does not
 * wait for client traffic: the first instance back answers a proactive probe and serves again
 * within one probe interval.
 *
 * @module
 */
import assert from "node:assert/strict";
import * as v from "valibot";
import { EgressSchema } from "../src/config/egress_schema.ts";
import type { Backend } from "../src/egress/destinations.ts";
import { Egress, type OutcomeBatch } from "../src/egress/egress.ts";
import { InstancePool } from "../src/egress/pool.ts";
import { egressSettings } from "../src/egress/settings.ts";
import { waitFor } from "./fixtures/in_process.ts";
import { SocksFixture } from "./fixtures/socks5.ts";

const ONION = "http://abcdefghijklmnopqrstuvwxyz234567abcdefghijklmnopqrstuv.onion";
const BACKEND: Backend = {
  key: ONION,
  hostname: ONION.slice("http://".length),
  port: 80,
  authority: ONION.slice("http://".length),
  target: `${ONION.slice("http://".length)}:80`,
  weight: 1,
};

/** An egress over `ports` on a settable clock, its log lines collected. */
function makeEgress(ports: number[], egress: Record<string, unknown>, now = { at: 0 }) {
  const settings = egressSettings(v.parse(EgressSchema, {
    socks: ports.map((port) => ({ hostname: "127.0.0.1", port })),
    connect_timeout_ms: 1000,
    ...egress,
  }));
  const lines: string[] = [];
  const clock = () => now.at;
  const instance = new Egress(settings, clock, { log: (line) => lines.push(line) });
  return { egress: instance, lines, now };
}

/** Sends one attempt through instance `index` (every other one excluded) and finishes it. */
function attempt(
  egress: Egress,
  index: number,
  outcome: { instanceOk: boolean; backendOk?: boolean; instanceDown?: boolean },
): void {
  const others = new Set(
    Array.from({ length: egress.pool.size }, (_, i) => i).filter((i) => i !== index),
  );
  const way = egress.way(BACKEND, others)!;
  assert.equal(way.kind === "socks" && way.pick.index, index, "steered onto the instance");
  egress.finish(way, BACKEND, outcome);
}

/** The lines about instance `port`'s breaker. */
function breakerLines(lines: string[], port: number): string[] {
  return lines.filter((line) => line.includes(`instance 127.0.0.1:${port} breaker`));
}

Deno.test("Egress logs each breaker transition once, with the window counts that decided it", async () => {
  const socks = [await SocksFixture.start(), await SocksFixture.start()];
  const [port] = [socks[0].port];
  const { egress, lines, now } = makeEgress(socks.map((s) => s.port), {
    probe_interval_ms: 200,
    breaker: { window: 4, min_samples: 4, failure_ratio: 0.5 },
  });
  try {
    attempt(egress, 0, { instanceOk: true });
    for (let i = 0; i < 3; i++) attempt(egress, 0, { instanceOk: false });
    assert.deepEqual(breakerLines(lines, port), [
      `portcullis: warning: egress: instance 127.0.0.1:${port} breaker healthy -> open ` +
      `(failure_ratio): 3 failures in 4 samples, 3 consecutive; next probe in 200 ms`,
    ]);

    // Other workers report the same death, batch after batch: this isolate decided once.
    const batch: OutcomeBatch = { instances: [0, 0, 0, 0, 0, 2], backends: [] };
    for (let i = 0; i < 5; i++) egress.applyOutcomes(batch);
    assert.equal(breakerLines(lines, port).length, 1, lines.join("\n"));

    // The probe interval ends: the gateway probes on its own (no request) and closes it.
    now.at = 200;
    await waitFor(() => breakerLines(lines, port).length, (n) => n === 3, 3000);
    assert.deepEqual(breakerLines(lines, port).slice(1), [
      `portcullis: egress: instance 127.0.0.1:${port} breaker open -> trial (probe_due): ` +
      `3 failures in 4 samples, 3 consecutive; open 200 ms`,
      `portcullis: egress: instance 127.0.0.1:${port} breaker trial -> healthy (probe_ok): ` +
      `3 failures in 4 samples, 3 consecutive; open 200 ms`,
    ]);
    assert.equal(egress.snapshot().instances[0].state, "healthy");

    // Opened again; this time its probe finds the port closed.
    for (let i = 0; i < 4; i++) attempt(egress, 0, { instanceOk: false });
    socks[0].mode = "refuse";
    now.at = 500;
    await waitFor(() => breakerLines(lines, port).length, (n) => n === 6, 3000);
    assert.deepEqual(breakerLines(lines, port).slice(3), [
      `portcullis: warning: egress: instance 127.0.0.1:${port} breaker healthy -> open ` +
      `(failure_ratio): 4 failures in 4 samples, 4 consecutive; next probe in 200 ms`,
      `portcullis: egress: instance 127.0.0.1:${port} breaker open -> trial (probe_due): ` +
      `4 failures in 4 samples, 4 consecutive; open 300 ms`,
      `portcullis: warning: egress: instance 127.0.0.1:${port} breaker trial -> open ` +
      `(probe_failed): 4 failures in 4 samples, 5 consecutive; open 300 ms; next probe in 200 ms`,
    ]);
    assert.equal(breakerLines(lines, socks[1].port).length, 0, "the other instance never moved");
  } finally {
    egress.close();
    await Promise.all(socks.map((s) => s.stop()));
  }
});

Deno.test("Egress.snapshot() names states plainly and reports the window's failure ratio when open", () => {
  const { egress, now } = makeEgress([19061, 19062], {
    probe_interval_ms: 30_000,
    breaker: { window: 20, min_samples: 20, failure_ratio: 0.6 },
  });
  try {
    for (let i = 0; i < 7; i++) attempt(egress, 0, { instanceOk: true });
    for (let i = 0; i < 13; i++) attempt(egress, 0, { instanceOk: false });
    now.at = 1000;
    const open = egress.snapshot();
    assert.equal(open.probe_interval_ms, 30_000);
    const [zero, one] = open.instances;
    assert.deepEqual(
      {
        state: zero.state,
        failure_ratio: zero.failure_ratio,
        window: zero.window,
        consecutive_failures: zero.consecutive_failures,
        requests: zero.requests,
        failures: zero.failures,
        retry_in_ms: zero.retry_in_ms,
      },
      {
        state: "open",
        failure_ratio: 13 / 20,
        window: { failures: 13, samples: 20 },
        consecutive_failures: 13,
        requests: 20,
        failures: 13,
        retry_in_ms: 29_000,
      },
    );
    assert.deepEqual([one.state, one.failure_ratio, one.window], [
      "healthy",
      0,
      { failures: 0, samples: 0 },
    ]);
    now.at = 30_000;
    assert.equal(egress.snapshot().instances[0].state, "trial", "due: its probe is next");
  } finally {
    egress.close();
  }
});

Deno.test("Egress logs a backend going cold and coming back once each, and reports its state", () => {
  const { egress, lines, now } = makeEgress([19063], {
    negative_cache: { failures: 3, ttl_ms: 5000 },
  });
  const backendLines = () => lines.filter((line) => line.includes(`backend ${ONION}`));
  try {
    attempt(egress, 0, { instanceOk: true, backendOk: false });
    attempt(egress, 0, { instanceOk: true, backendOk: false });
    assert.deepEqual(egress.snapshot().cold_backends, [
      { backend: ONION, state: "healthy", consecutive_failures: 2, cold_for_ms: 0 },
    ]);
    assert.deepEqual(backendLines(), []);
    attempt(egress, 0, { instanceOk: true, backendOk: false });
    // Shared by another worker, the same failures again: still one line.
    egress.applyOutcomes({ instances: [], backends: [ONION, 0, ONION, 0] });
    now.at = 1000;
    assert.deepEqual(egress.snapshot().cold_backends, [
      { backend: ONION, state: "cold", consecutive_failures: 5, cold_for_ms: 4000 },
    ]);
    attempt(egress, 0, { instanceOk: true, backendOk: true });
    assert.deepEqual(egress.snapshot().cold_backends, []);
    assert.deepEqual(backendLines(), [
      `portcullis: warning: egress: backend ${ONION} healthy -> cold: 3 consecutive failures; ` +
      `cold for 5000 ms`,
      `portcullis: egress: backend ${ONION} cold -> healthy (success): a request succeeded after ` +
      `5 consecutive failures`,
    ]);

    // Cold again, and this time the cold period simply ends: logged when it is found over.
    for (let i = 0; i < 3; i++) attempt(egress, 0, { instanceOk: true, backendOk: false });
    now.at = 6000;
    assert.equal(egress.cache.isCold(ONION), false);
    assert.equal(egress.cache.isCold(ONION), false);
    assert.deepEqual(backendLines().slice(2), [
      `portcullis: warning: egress: backend ${ONION} healthy -> cold: 3 consecutive failures; ` +
      `cold for 5000 ms`,
      `portcullis: egress: backend ${ONION} cold -> healthy (ttl): cold for 5000 ms after ` +
      `3 consecutive failures; it is tried again`,
    ]);
  } finally {
    egress.close();
  }
});

Deno.test("Egress: after every instance failed, the first one back is probed and serves within one probe interval", async () => {
  const PROBE = 400;
  const socks = await Promise.all([0, 1, 2].map(() => SocksFixture.start()));
  const settings = egressSettings(v.parse(EgressSchema, {
    socks: socks.map((s) => ({ hostname: "127.0.0.1", port: s.port })),
    connect_timeout_ms: 1000,
    probe_interval_ms: PROBE,
  }));
  const lines: string[] = [];
  const egress = new Egress(settings, () => performance.now(), { log: (l) => lines.push(l) });
  try {
    for (const s of socks) s.kill();
    for (let i = 0; i < 3; i++) attempt(egress, i, { instanceOk: false, instanceDown: true });
    const out = egress.snapshot();
    assert.deepEqual(out.instances.map((i) => i.state), ["open", "open", "open"]);
    assert.deepEqual(
      out.instances.map((i) => i.window),
      Array(3).fill({ failures: 1, samples: 1 }),
    );
    // With no request at all, the probes keep finding them dead.
    await waitFor(() => egress.snapshot().failed_probes, (n) => n >= 3, 4 * PROBE);

    await socks[1].restart();
    const back = performance.now();
    const healthy = await waitFor(
      () => egress.snapshot(),
      (e) => e.instances[1].state === "healthy",
      PROBE + 300,
    );
    const tookMs = performance.now() - back;
    assert.ok(tookMs <= PROBE + 300, `healthy after ${Math.round(tookMs)} ms`);
    assert.deepEqual(healthy.instances.map((i) => i.state).filter((s) => s === "healthy"), [
      "healthy",
    ]);
    assert.deepEqual(healthy.instances.map((i) => i.requests), [1, 1, 1], "no client request");
    assert.equal(socks[1].connects.length, 0, "the probe asked for no destination");

    // The next requests go to it, not round-robin over the dead ones.
    for (let i = 0; i < 4; i++) {
      const way = egress.way(BACKEND)!;
      assert.deepEqual(way.kind === "socks" && [way.pick.index, way.pick.fallback], [1, false]);
      egress.finish(way, BACKEND, { instanceOk: true });
    }
    assert.ok(
      lines.some((l) => l.includes(`127.0.0.1:${socks[1].port} breaker trial -> healthy`)),
      lines.join("\n"),
    );
  } finally {
    egress.close();
    await Promise.all(socks.map((s) => s.stop()));
  }
});

Deno.test("InstancePool: with every breaker open, requests stay on the instance that answered", () => {
  const time = { now: 0 };
  const pool = new InstancePool(["127.0.0.1:9050", "127.0.0.1:9051", "127.0.0.1:9052"], {
    breaker: { window: 2, minSamples: 2, probeIntervalMs: 1000 },
    clock: () => time.now,
  });
  for (let i = 0; i < 3; i++) pool.trip(i, "unreachable");
  const first = [pool.pick()!, pool.pick()!, pool.pick()!];
  assert.deepEqual(first.map((p) => [p.index, p.fallback]), [[0, true], [1, true], [2, true]]);
  pool.finish(first[0], false, undefined, true);
  pool.finish(first[1], true, 20);
  pool.finish(first[2], false, undefined, true);
  const next = Array.from({ length: 4 }, () => pool.pick()!);
  assert.deepEqual(next.map((p) => p.index), [1, 1, 1, 1], "no alternating with the dead ones");
  for (const pick of next) pool.finish(pick, true, 20);
  assert.equal(pool.pick(new Set([1]))!.index !== 1, true, "a retry still goes elsewhere");
  assert.deepEqual(pool.snapshot().map((r) => r.state), ["open", "open", "open"], "probes close");
  const failing = pool.pick()!;
  assert.equal(failing.index, 1);
  pool.finish(failing, false, undefined, true);
  assert.deepEqual([pool.pick()!.index, pool.pick()!.index], [1, 2], "round-robin again");
});
