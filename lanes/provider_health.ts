/**
 * The `provider_health` lane: an out-of-band probe port the public load balancer never routes to.
 * Serves exactly `GET /healthz` with a tiny fixed body — nothing else, so it cannot reach the
 * dataplane or an asset that would undercharge its small footprint. Its rate budget is mandatory.
 *
 * @module
 */
import type { PipelineServices } from "../src/pipeline/runner.ts";
import type { LaneDescriptor } from "../src/pipeline/lane_table.ts";

const OK = { status: 200, headers: { "content-type": "text/plain" }, body: "ok\n" } as const;
const DRAINING = {
  status: 503,
  headers: { "content-type": "text/plain" },
  body: "draining\n",
} as const;

/** The provider-health lane. */
export const providerHealthLane: LaneDescriptor<PipelineServices> = {
  name: "provider_health",
  summary: "GET /healthz only, tiny fixed body; small reserve and a mandatory rate budget",
  reach: "any",
  defaults: {
    reserve: 2,
    footprint_bytes: 1024,
    deadline_ms: 1000,
    max_connections: 64,
    rate: { per_second: 20, burst: 40 },
    rate_required: true,
  },
  routes: [
    {
      path: "/healthz",
      methods: ["GET"],
      handle: function providerHealth(_context, services) {
        return services.state.draining ? DRAINING : OK;
      },
    },
  ],
  drains: false,
};
