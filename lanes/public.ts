/**
 * The `public` lane: reachable from the internet. Serves anonymous `GET /healthz` and, for every
 * other request, the tenant dataplane. Draws from the general pool only — it has no reserve, so
 * public overload never converts into protected capacity. Stops admitting when the gateway drains.
 *
 * @module
 */
import type { AcmeServices } from "../src/pipeline/services.ts";
import type { PipelineServices } from "../src/pipeline/runner.ts";
import type { DataplaneServices } from "../src/pipeline/tenant_phases.ts";
import { TENANT_PHASES } from "../src/pipeline/tenant_phases.ts";
import { failureReply } from "../src/request/errors.ts";
import { acmeChallenge } from "../src/tls/acme.ts";
import { jsonReply } from "../src/request/reply.ts";
import type { LaneDescriptor } from "../src/pipeline/lane_table.ts";

/**
 * What the public lane is given: the runner's services, the dataplane's, and the ACME settings.
 *
 * @internal
 */
export type PublicServices = PipelineServices & DataplaneServices & AcmeServices;

/**
 * The public lane's plain-HTTP ACME companion: only http-01 challenges are answered (bypassing
 * policies and header injection, so a CA can always validate); everything else is a fixed 404 or
 * a redirect to https. Charged to the public lane's ledger like any public request.
 */
const acmeCompanion: LaneDescriptor<PublicServices> = {
  name: "public",
  summary: "ACME http-01 challenges only; everything else 404 or a redirect to https",
  reach: "any",
  defaults: {
    reserve: 0,
    footprint_bytes: 65_536,
    deadline_ms: 30_000,
    max_connections: 4096,
  },
  routes: [],
  phases: [{
    name: "acme",
    run: async function acmeOnly(context, services) {
      const acme = services.acme;
      const { method, path, query, host } = context.head;
      if (acme && (method === "GET" || method === "HEAD")) {
        const challenge = await acmeChallenge(path, acme.challengeDir);
        if (challenge) return challenge;
      }
      if (acme?.otherwise === "redirect" && host !== "") {
        return { status: 301, headers: { location: `https://${host}${path}${query}` }, body: "" };
      }
      return failureReply("route_not_allowed", context.requestId);
    },
  }],
  drains: true,
};

/** The public lane. */
export const publicLane: LaneDescriptor<PublicServices> = {
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
  phases: TENANT_PHASES,
  drains: true,
  acme: acmeCompanion,
};
