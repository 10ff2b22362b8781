/**
 * A pool's view applied to the egress: a port the pool does not list has its breaker opened, a
 * listed one keeps its breaker and takes the pool's latency as its score until the edge measures
 * its own; `/backends` answers are read strictly (anything else changes nothing).
 *
 * @module
 */
import assert from "node:assert/strict";
import * as v from "valibot";
import { EgressSchema } from "../src/config/egress_schema.ts";
import { Egress } from "../src/egress/egress.ts";
import { parseView } from "../src/egress/pool_view.ts";
import { egressSettings } from "../src/egress/settings.ts";

Deno.test("Egress.view.apply() trips the ports the pool does not list and seeds the others' latency", () => {
  const settings = egressSettings(
    v.parse(EgressSchema, {
      socks: [{ hostname: "127.0.0.1", port: 19050 }, { hostname: "127.0.0.1", port: 19051 }],
    }),
  );
  const egress = new Egress(settings, () => performance.now());
  try {
    assert.deepEqual(egress.view.apply([{ port: 19050, latencyMs: 300 }]), [1]);
    const [listed, missing] = egress.snapshot().instances;
    assert.equal(listed.state, "healthy");
    assert.equal(listed.score, 3, "2·0 + 300/100 + 10·0");
    assert.equal(missing.state, "open");
    assert.equal(missing.requests, 0, "no request was spent finding it");
    // Listed again: nothing is tripped; the breaker's own probe decides when it closes.
    assert.deepEqual(egress.view.apply([{ port: 19050 }, { port: 19051 }]), []);
  } finally {
    egress.close();
  }
});

Deno.test("parseView() reads a /backends answer and nothing else", () => {
  assert.deepEqual(parseView('{"backends":[{"port":9050,"latencyMs":12},{"port":"x"}]}'), [
    { port: 9050, latencyMs: 12 },
  ]);
  assert.equal(parseView('{"backends":{}}'), undefined);
  assert.equal(parseView("not json"), undefined);
  assert.deepEqual(parseView('{"backends":[]}'), []);
});
