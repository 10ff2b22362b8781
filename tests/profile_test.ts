import assert from "node:assert/strict";
import type { LaneName } from "../src/ledger/lane_names.ts";
import {
  type LaneProfileInput,
  type ProfileInput,
  type ProfileProblem,
  validateProfile,
} from "../src/ledger/profile.ts";
import { profileInput, profileOf } from "./fixtures/ledger.ts";

/** A valid profile: general pool 8 − (2 + 1) = 5, reserve bytes 2×500 + 1×200 = 1200. */
function base(): ProfileInput {
  return profileInput({
    application_slots: 8,
    inflight_bytes: 100_000,
    per_connection: 4,
    lanes: {
      public: { max_connections: 16, deadline_ms: 1000 },
      local_health: { max_connections: 4, deadline_ms: 500 },
      provider_health: {
        max_connections: 8,
        rate: { per_second: 20, burst: 40 },
        rate_required: true,
      },
    },
  });
}

function withLane(
  input: ProfileInput,
  name: LaneName,
  patch: Partial<LaneProfileInput>,
): ProfileInput {
  return { ...input, lanes: { ...input.lanes, [name]: { ...input.lanes[name], ...patch } } };
}

function problemsOf(input: ProfileInput): ProfileProblem[] {
  const result = validateProfile(input);
  assert.equal(result.ok, false, "expected the profile to be refused");
  return result.ok ? [] : result.problems;
}

/** The single problem at `path`, whose message must match `why`. */
function problemAt(input: ProfileInput, path: (string | number)[], why: RegExp): ProfileProblem {
  const found = problemsOf(input).filter((p) => why.test(p.message));
  assert.equal(found.length, 1, `expected one problem matching ${why}`);
  assert.deepEqual(found[0].path, path);
  return found[0];
}

Deno.test("validateProfile() accepts the base profile", () => {
  const profile = profileOf(base());
  assert.equal(profile.applicationSlots, 8);
  assert.equal(profile.lanes.length, 3);
});

Deno.test("validateProfile() requires application_slots to be a whole number of slots ≥ 1", () => {
  for (const bad of [0, -1, 2.5, NaN]) {
    const p = problemAt(
      { ...base(), application_slots: bad },
      ["application_slots"],
      /whole number of slots above 0 \(zero is an error, never unbounded\)/,
    );
    assert.ok(Object.is(p.value, bad));
  }
});

Deno.test("validateProfile() requires inflight_bytes to be a whole number ≥ 1", () => {
  for (const bad of [0, -5, 1.5]) {
    const p = problemAt(
      { ...base(), inflight_bytes: bad },
      ["inflight_bytes"],
      /Byte budget must be a whole number from 1/,
    );
    assert.equal(p.value, bad);
  }
});

Deno.test("validateProfile() requires per_connection to be a whole number ≥ 1", () => {
  for (const bad of [0, 1.5, -2]) {
    const problems = problemsOf({ ...base(), per_connection: bad });
    assert.equal(problems.length, 1);
    assert.deepEqual(problems[0].path, ["per_connection"]);
    assert.match(problems[0].message, /Per-connection bound must be a whole number above 0/);
  }
});

Deno.test("validateProfile() treats a zero footprint as an error, never unbounded", () => {
  const problems = problemsOf(withLane(base(), "local_health", { footprint_bytes: 0 }));
  assert.equal(problems.length, 1);
  assert.deepEqual(problems[0].path, ["lanes", "local_health", "footprint_bytes"]);
  assert.match(problems[0].message, /zero footprint is a profile error, never unbounded/);
});

Deno.test("validateProfile() refuses a footprint larger than the whole inflight_bytes", () => {
  const input = withLane({ ...base(), inflight_bytes: 3000 }, "public", { footprint_bytes: 3001 });
  const p = problemAt(
    input,
    ["lanes", "public", "footprint_bytes"],
    /footprint exceeds the whole byte budget \(inflight_bytes 3000\)/,
  );
  assert.equal(p.value, 3001);
});

Deno.test("validateProfile() requires deadline_ms ≥ 1", () => {
  const problems = problemsOf(withLane(base(), "public", { deadline_ms: 0 }));
  assert.equal(problems.length, 1);
  assert.deepEqual(problems[0].path, ["lanes", "public", "deadline_ms"]);
  assert.match(problems[0].message, /Deadline must be above 0/);
});

Deno.test("validateProfile() requires max_connections ≥ 1", () => {
  const problems = problemsOf(withLane(base(), "provider_health", { max_connections: 0 }));
  assert.equal(problems.length, 1);
  assert.deepEqual(problems[0].path, ["lanes", "provider_health", "max_connections"]);
  assert.match(problems[0].message, /Connection ceiling must be above 0/);
});

Deno.test("validateProfile() refuses a reserve on the public lane", () => {
  const p = problemAt(
    withLane(base(), "public", { reserve: 1 }),
    ["lanes", "public", "reserve"],
    /public lane has no reserve: it draws from the general pool only/,
  );
  assert.equal(p.value, 1);
});

Deno.test("validateProfile() requires a reserve above 0 on an enabled protected lane", () => {
  const problems = problemsOf(withLane(base(), "local_health", { reserve: 0 }));
  assert.equal(problems.length, 1);
  assert.deepEqual(problems[0].path, ["lanes", "local_health", "reserve"]);
  assert.match(problems[0].message, /"local_health" has a listener, so it needs a reserve above 0/);
});

Deno.test("validateProfile() requires reserve 0 on a disabled lane", () => {
  const problems = problemsOf(withLane(base(), "local_health", { enabled: false, reserve: 2 }));
  assert.equal(problems.length, 1);
  assert.deepEqual(problems[0].path, ["lanes", "local_health", "reserve"]);
  assert.match(problems[0].message, /"local_health" has no listener, so its reserve must be 0/);
});

Deno.test("validateProfile() requires the reserves to leave a general pool of at least 1", () => {
  const p = problemAt(
    { ...base(), application_slots: 3 },
    ["application_slots"],
    /reserves \(3 slots\) leave no general pool/,
  );
  assert.equal(p.value, 3);
  assert.equal(profileOf({ ...base(), application_slots: 4 }).generalPool, 1);
});

Deno.test("validateProfile() requires general bytes ≥ the widest enabled footprint", () => {
  // reserve bytes 1200, widest enabled footprint 1000: 2199 leaves 999 for the general pool
  const p = problemAt(
    { ...base(), inflight_bytes: 2199 },
    ["inflight_bytes"],
    /reserves hold 1200 bytes, leaving less than one request's footprint \(1000 bytes\)/,
  );
  assert.equal(p.value, 2199);
  assert.equal(profileOf({ ...base(), inflight_bytes: 2200 }).generalBytes, 1000);
  // a disabled lane's footprint and reserve are not counted
  const off = withLane({ ...base(), inflight_bytes: 2000 }, "public", {
    enabled: false,
    footprint_bytes: 1900,
  });
  assert.equal(profileOf(off).generalBytes, 800);
});

Deno.test("validateProfile() requires rate per_second > 0 and burst a whole number ≥ 1", () => {
  for (const bad of [0, -1, NaN, Infinity]) {
    const problems = problemsOf(
      withLane(base(), "provider_health", { rate: { per_second: bad, burst: 4 } }),
    );
    assert.equal(problems.length, 1);
    assert.deepEqual(problems[0].path, ["lanes", "provider_health", "rate", "per_second"]);
    assert.match(problems[0].message, /Refill rate must be above 0/);
  }
  for (const bad of [0, 1.5]) {
    const problems = problemsOf(
      withLane(base(), "public", { rate: { per_second: 5, burst: bad } }),
    );
    assert.equal(problems.length, 1);
    assert.deepEqual(problems[0].path, ["lanes", "public", "rate", "burst"]);
    assert.match(problems[0].message, /Burst must be a whole number above 0/);
  }
  assert.deepEqual(
    profileOf(withLane(base(), "provider_health", { rate: { per_second: 0.5, burst: 1 } }))
      .lanes[2].rate,
    { per_second: 0.5, burst: 1 },
  );
});

Deno.test("validateProfile() refuses a rate_required lane without a rate", () => {
  const problems = problemsOf(withLane(base(), "provider_health", { rate: undefined }));
  assert.equal(problems.length, 1);
  assert.deepEqual(problems[0].path, ["lanes", "provider_health", "rate"]);
  assert.match(problems[0].message, /"provider_health" requires a rate budget/);
});

Deno.test("validateProfile() keeps max_slots within reserve..reserve + general pool", () => {
  // local_health: reserve 2, general pool 5 → 2..7
  for (const bad of [1, 8, 2.5]) {
    const p = problemAt(
      withLane(base(), "local_health", { max_slots: bad }),
      ["lanes", "local_health", "max_slots"],
      /Lane ceiling must be from 2 \(its reserve\) to 7 \(reserve plus the general pool\)/,
    );
    assert.equal(p.value, bad);
  }
  for (const good of [2, 7]) {
    assert.equal(
      profileOf(withLane(base(), "local_health", { max_slots: good })).lanes[1].maxSlots,
      good,
    );
  }
  problemAt(
    withLane(base(), "public", { max_slots: 0 }),
    ["lanes", "public", "max_slots"],
    /from 1 \(its reserve\) to 5/,
  );
  problemAt(
    withLane(base(), "public", { max_slots: 6 }),
    ["lanes", "public", "max_slots"],
    /from 1 \(its reserve\) to 5/,
  );
});

Deno.test("validateProfile() derives general pool, general bytes and default ceilings", () => {
  const profile = profileOf(base());
  assert.equal(profile.generalPool, 5);
  assert.equal(profile.generalBytes, 100_000 - 1200);
  assert.deepEqual(profile.lanes.map((l) => [l.name, l.maxSlots]), [
    ["public", 5], // the general pool
    ["local_health", 4], // 2 + min(2, 5)
    ["provider_health", 2], // 1 + min(1, 5)
  ]);
  // a general pool smaller than the reserve caps the borrow
  const tight = profileOf(withLane({ ...base(), application_slots: 5 }, "local_health", {
    reserve: 3,
  }));
  assert.equal(tight.generalPool, 1);
  assert.deepEqual(tight.lanes.map((l) => l.maxSlots), [1, 4, 2]); // 1; 3 + min(3, 1); 1 + 1
  assert.equal(tight.generalBytes, 100_000 - (3 * 500 + 200));
});

Deno.test("validateProfile() reports several problems at once", () => {
  let input: ProfileInput = { ...base(), per_connection: 0 };
  input = withLane(input, "public", { reserve: 3, deadline_ms: 0 });
  input = withLane(input, "local_health", { footprint_bytes: 0 });
  input = withLane(input, "provider_health", { rate: undefined });
  const paths = problemsOf(input).map((p) => p.path.join("."));
  assert.deepEqual(paths.sort(), [
    "lanes.local_health.footprint_bytes",
    "lanes.provider_health.rate",
    "lanes.public.deadline_ms",
    "lanes.public.reserve",
    "per_connection",
  ]);
});

Deno.test("validateProfile() reports every problem in check order: globals, lanes, pool, ceilings", () => {
  // One input that breaks eight rules in five checks. The order is part of the contract: the
  // operator reads the list top to bottom, and a reordering of the checks must show up here.
  let input: ProfileInput = { ...base(), application_slots: 4, per_connection: 0 };
  input = withLane(input, "public", {
    deadline_ms: 0,
    reserve: 1,
    rate: { per_second: 5, burst: 0 },
    priority_reserve: 5,
  });
  input = withLane(input, "local_health", { max_slots: 1 });
  input = withLane(input, "provider_health", { rate: undefined });
  const listed = problemsOf(input).map((p) => [p.path.join("."), p.message, p.value]);
  assert.deepEqual(listed, [
    ["per_connection", "Per-connection bound must be a whole number above 0", 0],
    ["lanes.public.deadline_ms", "Deadline must be above 0", 0],
    [
      "lanes.public.reserve",
      "The public lane has no reserve: it draws from the general pool only",
      1,
    ],
    ["lanes.public.rate.burst", "Burst must be a whole number above 0", 0],
    ["lanes.provider_health.rate", 'Lane "provider_health" requires a rate budget', undefined],
    [
      "application_slots",
      "The reserves (4 slots) leave no general pool; application_slots must exceed them",
      4,
    ],
    [
      "lanes.public.priority_reserve",
      "The priority reserve must leave slots for ordinary routes (ceiling 1)",
      5,
    ],
    [
      "lanes.local_health.max_slots",
      "Lane ceiling must be from 2 (its reserve) to 2 (reserve plus the general pool)",
      1,
    ],
  ]);
});
