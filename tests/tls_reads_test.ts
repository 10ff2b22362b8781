/**
 * `holdTlsReads()` (src/egress/tls_reads.ts): on Deno 2.9.6 a paused `node:tls` socket goes on
 * reading its TCP socket into memory. With it, a paused TLS socket — server side (the hub's relay
 * and tunnel) or client side (the edge's dial to the hub) — takes no more than the kernel's buffers
 * from a peer writing as fast as it can, and resuming reads everything that waited.
 */
import assert from "node:assert/strict";
import tls from "node:tls";
import { holdTlsReads } from "../src/egress/tls_reads.ts";
import { TestPki } from "./fixtures/certs.ts";
import { freePorts } from "./fixtures/gateway.ts";

/** The most a writer may get taken from a paused reader (the kernel's buffers, both ends). */
const TAKEN_BOUND = 24 * 1024 * 1024;
/** What the writer offers: more than any kernel buffers. */
const OFFERED = 64 * 1024 * 1024;

/**
 * Writes 64 KiB chunks, each after the last was taken, until `OFFERED` bytes or until nothing was
 * taken for 500 ms; resolves with the bytes taken.
 */
function writeUntilStalled(socket: tls.TLSSocket): Promise<number> {
  return new Promise((resolve) => {
    let taken = 0;
    let stall = setTimeout(() => resolve(taken), 500);
    const next = () => {
      if (taken >= OFFERED) {
        clearTimeout(stall);
        return resolve(taken);
      }
      socket.write(new Uint8Array(64 * 1024), (error) => {
        if (error) return;
        taken += 64 * 1024;
        clearTimeout(stall);
        stall = setTimeout(() => resolve(taken), 500);
        next();
      });
    };
    next();
  });
}

/** Waits until `read()` reaches `want` (or 10 s pass). */
async function until(read: () => number, want: number): Promise<number> {
  const end = Date.now() + 10_000;
  while (read() < want && Date.now() < end) await new Promise((r) => setTimeout(r, 20));
  return read();
}

/** A TLS server and a client connected to it, on loopback; `paused` says which side reads. */
async function pair(paused: "server" | "client") {
  const pki = await TestPki.create();
  const leaf = await pki.issue("reads.test", { altNames: ["127.0.0.1"] });
  const [port] = freePorts(1);
  let received = 0;
  const accepted = Promise.withResolvers<tls.TLSSocket>();
  const server = tls.createServer({
    cert: await Deno.readTextFile(leaf.certFile),
    key: await Deno.readTextFile(leaf.keyFile),
  }, (socket) => accepted.resolve(socket));
  await new Promise<void>((resolve) => server.listen(port, "127.0.0.1", resolve));
  const client = tls.connect({
    host: "127.0.0.1",
    port,
    ca: pki.ca.certPem,
    servername: "reads.test",
  });
  await new Promise((resolve) => client.once("secureConnect", resolve));
  const serverSide = await accepted.promise;
  const reader = paused === "server" ? serverSide : client;
  const writer = paused === "server" ? client : serverSide;
  for (const socket of [reader, writer]) socket.on("error", () => {});
  return {
    reader,
    writer,
    received: () => received,
    count: () => reader.on("data", (chunk: Uint8Array) => received += chunk.length),
    async close() {
      client.destroy();
      serverSide.destroy();
      await new Promise((resolve) => server.close(resolve));
      await pki.dispose();
    },
  };
}

for (const side of ["server", "client"] as const) {
  Deno.test(`holdTlsReads() keeps a paused ${side}-side TLS socket from reading past the kernel's buffers`, async () => {
    const sockets = await pair(side);
    try {
      assert.equal(holdTlsReads(sockets.reader), true);
      sockets.count();
      sockets.reader.pause();
      const taken = await writeUntilStalled(sockets.writer);
      assert.ok(taken < TAKEN_BOUND, `${taken} bytes taken from the writer while paused`);
      assert.equal(sockets.received(), 0);
      sockets.reader.resume();
      const read = await until(sockets.received, taken);
      assert.ok(read >= taken, `resumed, it reads all of it (${read} of ${taken} bytes)`);
    } finally {
      await sockets.close();
    }
  });
}
