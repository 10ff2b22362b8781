/**
 * A second gateway on a config whose ports are taken refuses to boot, naming the port, and the
 * first keeps serving every lane. Request workers bind the public ports with `reusePort`, which any
 * process of the same user may join: on the main issue 31 started from, a second `serve` of the
 * same config bound beside the first, said `ready`, and the kernel split users between the two.
 *
 * Both processes run `main.ts serve` under the flags `main.ts flags` derives, from one config:
 * with protected lanes (`workers: 1` and `2`), and with no protected lane (`workers: 2`, where
 * only the public probe stands between them). Two processes started at once on one config end
 * with exactly one serving: worker 0 binds its protected listeners without port sharing before any
 * public worker binds, so the second stops there.
 *
 * @module
 */
import assert from "node:assert/strict";
import {
  derivedFlags,
  freePorts,
  Gateway,
  type LanePorts,
  MAIN,
  proofConfig,
  writeConfig,
} from "./fixtures/gateway.ts";
import { request } from "./fixtures/http_client.ts";
import { parseDiag } from "./fixtures/diag_lines.ts";

/** How a gateway process ended. */
interface Outcome {
  readonly code: number;
  readonly stderr: string;
}

/** A `main.ts serve` process being watched. */
interface Serving {
  /** True once it said `ready`; false when it exited first. */
  readonly ready: Promise<boolean>;
  readonly exited: Promise<Outcome>;
  /** Sends SIGTERM. */
  stop(): void;
}

/** Starts `main.ts serve <config>` under `flags` (SIGKILL after 30 s). */
function serve(config: string, flags: readonly string[]): Serving {
  const child = new Deno.Command(Deno.execPath(), {
    args: ["run", "--no-prompt", ...flags, MAIN, "serve", config],
    stdout: "null",
    stderr: "piped",
    stdin: "null",
    env: { NO_COLOR: "1" },
  }).spawn();
  const kill = setTimeout(() => child.kill("SIGKILL"), 30_000);
  const ready = Promise.withResolvers<boolean>();
  const exited = (async () => {
    const lines: string[] = [];
    let buffered = "";
    for await (const chunk of child.stderr.pipeThrough(new TextDecoderStream())) {
      buffered += chunk;
      const parts = buffered.split("\n");
      buffered = parts.pop()!;
      for (const line of parts) {
        lines.push(line);
        if (parseDiag(line)?.msg.startsWith("ready")) ready.resolve(true);
      }
    }
    const status = await child.status;
    clearTimeout(kill);
    ready.resolve(false);
    return { code: status.code, stderr: [...lines, buffered].join("\n") };
  })();
  return {
    ready: ready.promise,
    exited,
    stop: () => {
      try {
        child.kill("SIGTERM");
      } catch { /* gone */ }
    },
  };
}

/** The first gateway answers on every lane it has, and counted only what it was sent. */
async function servesEveryLane(first: Gateway): Promise<void> {
  const before = (await first.ledger()).lanes.public.admitted;
  for (let i = 0; i < 10; i++) {
    const answer = await request(first.ports.public, {
      path: "/",
      headers: [["Host", "demo.test"]],
    });
    assert.equal(answer.status, 200);
    assert.equal(answer.body, "tenant-home");
  }
  const after = await first.ledgerWhen((r) => r.lanes.public.admitted - before === 10);
  assert.equal(after.lanes.public.admitted - before, 10, "every request reached the first");
  assert.equal((await request(first.ports.local_health, { path: "/readyz" })).status, 200);
  if (first.ports.provider_health) {
    const probe = await request(first.ports.provider_health, { path: "/healthz" });
    assert.equal(probe.status, 200);
  }
}

const CASES = [
  { name: "workers: 1 with protected lanes", workers: 1, protectedLanes: true },
  { name: "workers: 2 with protected lanes", workers: 2, protectedLanes: true },
  { name: "workers: 2 and no protected lane", workers: 2, protectedLanes: false },
];

for (const { name, workers, protectedLanes } of CASES) {
  Deno.test(`second process: ${name}, a second serve of the same config refuses, naming the public port`, async () => {
    const [p, l, h] = freePorts(3);
    const ports: LanePorts = protectedLanes
      ? { public: p, local_health: l, provider_health: h }
      : { public: p, local_health: 0, provider_health: 0 };
    const config = proofConfig(ports, { workers });
    const dir = await writeConfig(config);
    const first = await Gateway.start(dir, ports);
    try {
      const serving = serve(dir.config, first.flags);
      const ready = await serving.ready;
      serving.stop();
      const second = await serving.exited;
      assert.equal(ready, false, `the second said ready:\n${second.stderr}`);
      assert.notEqual(second.code, 0);
      assert.match(
        second.stderr,
        new RegExp(
          `Cannot bind lane \\\\?"public\\\\?" on 127\\.0\\.0\\.1:${ports.public}: ` +
            "address already in use by another process",
        ),
      );
      if (protectedLanes) await servesEveryLane(first);
      else {
        for (let i = 0; i < 10; i++) {
          const answer = await request(ports.public, {
            path: "/",
            headers: [["Host", "demo.test"]],
          });
          assert.equal(answer.status, 200);
        }
      }
      assert.equal((await first.stop("SIGTERM")).code, 0, first.stderr);
    } finally {
      await first.dispose();
    }
  });
}

Deno.test("second process: two serves of one config started at once end with exactly one serving", async () => {
  for (let round = 0; round < 2; round++) {
    const [p, l, h] = freePorts(3);
    const ports: LanePorts = { public: p, local_health: l, provider_health: h };
    const dir = await writeConfig(proofConfig(ports, { workers: 2 }));
    try {
      const flags = await derivedFlags(dir.config);
      const both = [serve(dir.config, flags), serve(dir.config, flags)];
      // Each is ready or gone before either is stopped: a stopped winner frees its ports.
      const ready = await Promise.all(both.map((one) => one.ready));
      for (const one of both) one.stop();
      const outcomes = await Promise.all(both.map((one) => one.exited));
      const log = outcomes.map((o) => o.stderr).join("\n---\n");
      assert.equal(ready.filter(Boolean).length, 1, log);
      const refused = outcomes[ready.indexOf(false)];
      assert.notEqual(refused.code, 0);
      assert.match(
        refused.stderr,
        new RegExp(
          `Cannot bind lane \\\\?"\\w+\\\\?" on 127\\.0\\.0\\.1:(${p}|${l}|${h}): address`,
        ),
      );
    } finally {
      await Deno.remove(dir.dir, { recursive: true });
    }
  }
});

Deno.test("second process: another config sharing only the local_health port refuses, naming it", async () => {
  const [p, l, h, p2, h2] = freePorts(5);
  const ports: LanePorts = { public: p, local_health: l, provider_health: h };
  const dir = await writeConfig(proofConfig(ports, { workers: 1 }));
  const other = await writeConfig(
    proofConfig({ public: p2, local_health: l, provider_health: h2 }, { workers: 1 }),
  );
  const first = await Gateway.start(dir, ports);
  try {
    // Worker 0 binds the protected lanes without port sharing: nobody can join them.
    const serving = serve(other.config, await derivedFlags(other.config));
    const ready = await serving.ready;
    serving.stop();
    const second = await serving.exited;
    assert.equal(ready, false, `the second said ready:\n${second.stderr}`);
    assert.notEqual(second.code, 0);
    assert.match(
      second.stderr,
      new RegExp(`Cannot bind lane \\\\?"local_health\\\\?" on 127\\.0\\.0\\.1:${l}: address`),
    );
    await servesEveryLane(first);
  } finally {
    await first.dispose();
    await Deno.remove(other.dir, { recursive: true });
  }
});
