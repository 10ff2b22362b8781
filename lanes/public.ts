/**
 * The `public` lane: reachable from the internet. Serves anonymous `GET /healthz` and, for every
 * other request, the tenant dataplane. Draws from the general pool only — it has no reserve, so
 * public overload never converts into protected capacity. Stops admitting when the gateway drains.
 *
 * @module
 */
import type { EdgeServices } from "../src/edge/services.ts";
import { serveTenant } from "../src/proxy/dataplane.ts";
import { jsonReply } from "../src/server/reply.ts";
import type { LaneDescriptor } from "../src/server/lane.ts";

/** The public lane. */
export const publicLane: LaneDescriptor<EdgeServices> = {
  name: "public",
  summary: "tenant traffic and anonymous GET /healthz; general pool only",
  reach: "any",
  defaults: {
    reserve: 0,
    footprint_bytes: 65_536,
    deadline_ms: 30_000,
    max_connections: 4096,
  },
  routes: [
    {
      path: "/healthz",
      methods: ["GET", "HEAD"],
      handle: function publicHealth() {
        return jsonReply({ status: "ok" });
      },
    },
  ],
  dataplane: function tenantDataplane(context, services) {
    return serveTenant(context, services);
  },
  drains: true,
};
