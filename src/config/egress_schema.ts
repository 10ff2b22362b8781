/**
 * The `egress` section of the bootstrap config: the SOCKS pool, the `direct` upstream allowlist,
 * and the timeouts, breaker, negative cache and retry numbers of the proxy dataplane.
 *
 * @module
 */
import * as v from "valibot";
import { parseCidr } from "../request/cidr.ts";
import { splitTarget } from "../request/host.ts";
import { IpLiteral, Port, wholeNumber } from "./fields.ts";

/** `host:port` as `--allow-net` spells it (IPv6 in brackets). */
export const HostPort = v.pipe(
  v.string("Expected host:port"),
  v.regex(
    /^(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9](?:[A-Za-z0-9.-]{0,251}[A-Za-z0-9])?):\d{1,5}$/,
    "Expected host:port, e.g. 10.0.0.5:8080 or [::1]:8080",
  ),
  // Only a value that has a port can have a bad one: "10.0.0.5" is refused by the regex alone.
  v.check((text) => {
    const port = /:(\d{1,5})$/.exec(text);
    return !port || (Number(port[1]) >= 1 && Number(port[1]) <= 65535);
  }, "Port must be from 1 to 65535"),
);

const ratio = (fallback: number) =>
  v.optional(
    v.pipe(
      v.number("Expected a number"),
      v.minValue(0, "Expected 0 to 1"),
      v.maxValue(1, "Expected 0 to 1"),
    ),
    fallback,
  );

/** The egress section. */
export const EgressSchema = v.optional(
  v.strictObject({
    socks: v.optional(v.array(v.strictObject({ hostname: IpLiteral, port: Port })), []),
    direct: v.optional(v.array(HostPort, "Expected a list of host:port"), []),
    /**
     * Internal destinations (loopback, private, link-local, unique-local, …) tenants may reach:
     * CIDRs or exact host:port targets. Everything internal not listed is refused at connect time.
     */
    allow_private: v.optional(
      v.array(
        v.pipe(
          v.string("Expected a CIDR such as 10.0.0.0/8 or a host:port"),
          v.check(
            (text) => splitTarget(text) !== undefined || typeof parseCidr(text) !== "string",
            "Expected a CIDR such as 10.0.0.0/8 or a host:port such as 10.0.0.5:8080",
          ),
        ),
        "Expected a list of CIDRs and host:port targets",
      ),
      [],
    ),
    connect_timeout_ms: v.optional(wholeNumber(1, 600_000), 10_000),
    body_idle_ms: v.optional(wholeNumber(1, 3_600_000), 60_000),
    idle_socket_ms: v.optional(wholeNumber(1, 3_600_000), 30_000),
    probe_interval_ms: v.optional(wholeNumber(1, 3_600_000), 30_000),
    breaker: v.optional(
      v.strictObject({
        window: v.optional(wholeNumber(1, 1000), 20),
        min_samples: v.optional(wholeNumber(1, 1000), 10),
        failure_ratio: ratio(0.5),
      }),
      {},
    ),
    negative_cache: v.optional(
      v.strictObject({
        failures: v.optional(wholeNumber(1, 1000), 3),
        ttl_ms: v.optional(wholeNumber(1, 86_400_000), 30_000),
      }),
      {},
    ),
    retry: v.optional(
      v.strictObject({
        budget_ratio: ratio(0.2),
        budget_min: v.optional(wholeNumber(0, 1_000_000), 10),
        window_ms: v.optional(wholeNumber(10, 3_600_000), 10_000),
        backoff_base_ms: v.optional(wholeNumber(0, 60_000), 25),
        backoff_cap_ms: v.optional(wholeNumber(0, 60_000), 250),
      }),
      {},
    ),
  }),
  {},
);

/** The egress section as validated. */
export type EgressConfig = v.InferOutput<typeof EgressSchema>;
