/**
 * Egress destinations (src/egress/destinations.ts) at the unit level: which hosts count as
 * internal, which listener of this process a backend reaches, and what `egress.allow_private`
 * lets through. The config tests reach these rules only through a few spellings. Killed
 * mutations: `destinations.metadata-reachable`, `destinations.localhost-subdomains`,
 * `destinations.wildcard-listener-v6`, `destinations.localhost-one-family`.
 *
 * @module
 */
import assert from "node:assert/strict";
import {
  internalDestination,
  PrivateAllowance,
  refuseInternal,
} from "../src/egress/destinations.ts";
import { ownListener } from "../src/egress/own_listener.ts";

const METADATA = "a link-local address (cloud metadata lives there)";

Deno.test("internalDestination() refuses all of 169.254.0.0/16, not only its first block", () => {
  for (const host of ["169.254.169.254", "169.254.170.2", "169.254.0.1", "169.254.255.254"]) {
    assert.equal(internalDestination(host), METADATA, host);
  }
  assert.equal(internalDestination("[::ffff:169.254.169.254]"), METADATA);
  assert.equal(internalDestination("169.255.0.1"), undefined);
  assert.match(
    refuseInternal("169.254.169.254", 80, new PrivateAllowance([])) ?? "",
    /^Destination 169\.254\.169\.254:80 is a link-local address/,
  );
});

Deno.test("internalDestination() reads every *.localhost name as this machine", () => {
  for (const host of ["localhost", "api.localhost", "A.B.Localhost.", "ip6-localhost"]) {
    assert.equal(internalDestination(host), "a name of this machine", host);
  }
  assert.equal(internalDestination("localhost.example"), undefined);
  assert.equal(internalDestination("notlocalhost"), undefined);
});

Deno.test("ownListener() finds a listener on :: from any internal address on its port", () => {
  const listeners = [
    { hostname: "::", port: 9901, name: "lanes.local_health.listen[0]" },
    { hostname: "0.0.0.0", port: 9902, name: "lanes.provider_health.listen[0]" },
    { hostname: "127.0.0.1", port: 9903, name: "lanes.public.listen[0]" },
  ];
  for (const host of ["192.168.1.10", "10.0.0.5", "[fd00::1]", "169.254.1.1", "127.0.0.2"]) {
    assert.equal(ownListener(host, 9901, listeners)?.name, listeners[0].name, host);
    assert.equal(ownListener(host, 9902, listeners)?.name, listeners[1].name, host);
  }
  // A listener on one loopback address: other loopback spellings reach it, private ones do not.
  assert.equal(ownListener("0x7f.1", 9903, listeners)?.name, listeners[2].name);
  assert.equal(ownListener("192.168.1.10", 9903, listeners), undefined);
  assert.equal(ownListener("203.0.113.9", 9901, listeners), undefined);
  assert.equal(ownListener("192.168.1.10", 9904, listeners), undefined);
});

Deno.test("PrivateAllowance.allows() lets localhost through only when both loopbacks are allowed", () => {
  const both = new PrivateAllowance(["127.0.0.0/8", "::1/128"]);
  assert.equal(both.allows("localhost", 8080), true);
  assert.equal(both.allows("api.localhost", 8080), true);
  for (const entries of [["127.0.0.0/8"], ["::1/128"], ["::1"], []]) {
    const one = new PrivateAllowance(entries);
    assert.equal(one.allows("localhost", 8080), false, entries.join(","));
    assert.equal(one.allows("shop.example", 8080), false, entries.join(","));
    assert.ok(refuseInternal("localhost", 8080, one), entries.join(","));
  }
  const target = new PrivateAllowance(["localhost:8080"]);
  assert.equal(target.allows("localhost", 8080), true);
  assert.equal(target.allows("localhost", 8081), false);
});
