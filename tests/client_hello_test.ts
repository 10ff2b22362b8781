import assert from "node:assert/strict";
import net from "node:net";
import tls from "node:tls";
import { type HelloResult, readClientHello } from "../src/tls/client_hello.ts";
import { boundedTest } from "./fixtures/bounded_test.ts";
import { mulberry32 } from "./fixtures/random.ts";

/** A sanitized test bounded to 3000 ms (a broken pipe fails instead of hanging). */
function strictTest(name: string, fn: () => void | Promise<void>): void {
  boundedTest(name, fn, 3000);
}

const encoder = new TextEncoder();

// ---- Building ClientHellos by hand (RFC 8446 §4.1.2, RFC 6066 §3) ----

const u16 = (n: number) => [(n >> 8) & 255, n & 255];
const u24 = (n: number) => [(n >> 16) & 255, (n >> 8) & 255, n & 255];
const vec16 = (bytes: readonly number[]) => [...u16(bytes.length), ...bytes];
const extension = (type: number, data: readonly number[]) => [...u16(type), ...vec16(data)];
const ascii = (text: string) => [...encoder.encode(text)];

/** A server_name extension holding one host_name entry. */
function sni(name: string | readonly number[]): number[] {
  const bytes = typeof name === "string" ? ascii(name) : name;
  return extension(0, vec16([0, ...vec16(bytes)]));
}

/** A ClientHello handshake message; `extensions: null` omits the block (TLS 1.2 allows it). */
function helloMessage(extensions: readonly number[][] | null, type = 1): number[] {
  const body = [
    ...u16(0x0303),
    ...new Array(32).fill(7),
    32,
    ...new Array(32).fill(9),
    ...vec16([0x13, 0x01, 0x13, 0x02, 0xc0, 0x2f]),
    1,
    0,
    ...(extensions === null ? [] : vec16(extensions.flat())),
  ];
  return [type, ...u24(body.length), ...body];
}

/** Wraps a handshake message in handshake records of the given fragment sizes (last takes the rest). */
function records(message: readonly number[], sizes: readonly number[] = []): Uint8Array {
  const out: number[] = [];
  let at = 0;
  for (const size of [...sizes, message.length]) {
    if (at >= message.length) break;
    const fragment = message.slice(at, at + size);
    out.push(22, 3, 1, ...u16(fragment.length), ...fragment);
    at += fragment.length;
  }
  return new Uint8Array(out);
}

const SUPPORTED_VERSIONS = extension(43, [2, 3, 4]);
const shopHello = () => records(helloMessage([sni("shop.example"), SUPPORTED_VERSIONS]));

// ---- Capturing ClientHellos from a real TLS client (Deno's node:tls) ----

/** Connects a node:tls client to a plain TCP server and returns its first TLS record. */
async function captureClientHello(options: tls.ConnectionOptions): Promise<Uint8Array> {
  const server = net.createServer();
  const received = new Promise<Uint8Array>((resolve, reject) => {
    server.once("connection", (socket: net.Socket) => {
      let bytes = new Uint8Array(0);
      socket.on("error", () => {});
      socket.on("end", () => reject(new Error("Client closed before its ClientHello")));
      socket.on("data", (chunk: Uint8Array) => {
        bytes = new Uint8Array([...bytes, ...chunk]);
        if (bytes.length >= 5 && bytes.length >= 5 + ((bytes[3] << 8) | bytes[4])) {
          socket.destroy();
          resolve(bytes);
        }
      });
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as net.AddressInfo;
  const client = tls.connect({ host: "127.0.0.1", port, rejectUnauthorized: false, ...options });
  const clientClosed = new Promise((resolve) => client.once("close", resolve));
  client.on("error", () => {});
  try {
    return await received;
  } finally {
    client.destroy();
    await clientClosed;
    await new Promise((resolve) => server.close(resolve));
  }
}

/** The bytes contain `needle` somewhere. */
function contains(bytes: Uint8Array, needle: readonly number[]): boolean {
  return bytes.some((_, i) => needle.every((b, j) => bytes[i + j] === b));
}

strictTest("readClientHello() finds the SNI of a real TLS 1.3 client", async () => {
  const hello = await captureClientHello({ servername: "shop.example", minVersion: "TLSv1.3" });
  assert.ok(contains(hello, extension(43, [2, 3, 4])), "the client offers TLS 1.3 only");
  assert.deepEqual(readClientHello(hello), { kind: "hello", serverName: "shop.example" });
});

strictTest("readClientHello() finds the SNI of a real TLS 1.2-only client", async () => {
  const hello = await captureClientHello({ servername: "api.shop.example", maxVersion: "TLSv1.2" });
  assert.ok(contains(hello, extension(43, [2, 3, 3])), "the client offers TLS 1.2 only");
  assert.deepEqual(readClientHello(hello), { kind: "hello", serverName: "api.shop.example" });
});

strictTest("readClientHello() reports no name for a real client that sends no SNI", async () => {
  for (const options of [{ servername: "" }, {}]) {
    const hello = await captureClientHello(options);
    assert.deepEqual(readClientHello(hello), { kind: "hello" });
  }
});

strictTest("readClientHello() lower-cases the name and drops a trailing dot", () => {
  const hello = records(helloMessage([sni("Shop.EXAMPLE.")]));
  assert.deepEqual(readClientHello(hello), { kind: "hello", serverName: "shop.example" });
});

strictTest("readClientHello() accepts a TLS 1.2 hello without extensions", () => {
  assert.deepEqual(readClientHello(records(helloMessage(null))), { kind: "hello" });
});

strictTest("readClientHello() ignores bytes after the ClientHello", () => {
  const changeCipherSpec = [20, 3, 3, 0, 1, 1];
  const bytes = new Uint8Array([...shopHello(), ...changeCipherSpec]);
  assert.deepEqual(readClientHello(bytes), { kind: "hello", serverName: "shop.example" });
});

/** Every proper prefix is incomplete and the whole is the hello. */
function assertPrefixesIncomplete(bytes: Uint8Array, serverName?: string): void {
  for (let length = 0; length < bytes.length; length++) {
    const result = readClientHello(bytes.subarray(0, length));
    assert.deepEqual(result, { kind: "incomplete" }, `prefix of ${length}/${bytes.length} bytes`);
  }
  const expected = serverName === undefined ? { kind: "hello" } : { kind: "hello", serverName };
  assert.deepEqual(readClientHello(bytes), expected);
}

strictTest("readClientHello() reassembles a hello split across records", () => {
  const message = helloMessage([sni("shop.example"), SUPPORTED_VERSIONS]);
  const twoRecords = records(message, [40]);
  assert.equal(twoRecords.length, message.length + 10);
  assertPrefixesIncomplete(twoRecords, "shop.example");
  // The handshake header itself split, and one byte per record.
  assertPrefixesIncomplete(records(message, [2]), "shop.example");
  assertPrefixesIncomplete(records(message, new Array(63).fill(1)), "shop.example");
});

strictTest("readClientHello() is incomplete over many small TCP reads until the last", async () => {
  const bytes = records(helloMessage([sni("shop.example"), SUPPORTED_VERSIONS]), [60]);
  const results: HelloResult[] = [];
  const server = net.createServer();
  const done = new Promise<void>((resolve) => {
    server.once("connection", (socket: net.Socket) => {
      let buffered = new Uint8Array(0);
      socket.on("data", (chunk: Uint8Array) => {
        buffered = new Uint8Array([...buffered, ...chunk]);
        results.push(readClientHello(buffered));
      });
      socket.on("close", () => resolve());
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const client = net.connect((server.address() as net.AddressInfo).port, "127.0.0.1");
  client.setNoDelay(true);
  await new Promise((resolve) => client.once("connect", resolve));
  for (let at = 0; at < bytes.length; at += 7) {
    await new Promise((resolve) => client.write(bytes.subarray(at, at + 7), resolve));
    await new Promise((resolve) => setTimeout(resolve, 1));
  }
  client.end();
  await done;
  await new Promise((resolve) => server.close(resolve));
  assert.ok(results.length > 1, `${results.length} reads`);
  assert.deepEqual(results.slice(0, -1), results.slice(0, -1).map(() => ({ kind: "incomplete" })));
  assert.deepEqual(results.at(-1), { kind: "hello", serverName: "shop.example" });
});

// ---- Malformed input ----

/** Asserts `bytes` is invalid with a reason matching `pattern`. */
function assertInvalid(bytes: Uint8Array, pattern: RegExp, max?: number): void {
  const result = readClientHello(bytes, max);
  assert.equal(result.kind, "invalid", JSON.stringify(result));
  assert.match((result as { reason: string }).reason, pattern);
}

strictTest("readClientHello() refuses what is not a TLS handshake record", () => {
  assertInvalid(encoder.encode("GET / HTTP/1.1\r\nHost: shop.example\r\n\r\n"), /handshake record/);
  assertInvalid(encoder.encode("G"), /handshake record/);
  assertInvalid(new Uint8Array([0x80, 0x2e, 0x01, 0x03, 0x01]), /handshake record/); // SSLv2
  assertInvalid(new Uint8Array([22, 0x47]), /record version/);
  const message = helloMessage([sni("shop.example")]);
  const firstRecord = records(message, [10]).subarray(0, 15);
  const applicationData = [23, 3, 3, 0, 1, 0]; // interleaved before the hello is complete
  assertInvalid(new Uint8Array([...firstRecord, ...applicationData]), /handshake record/);
});

strictTest("readClientHello() refuses records over 2^14 bytes and empty records", () => {
  assertInvalid(new Uint8Array([22, 3, 1, 0x40, 0x01]), /2\^14/);
  assertInvalid(new Uint8Array([22, 3, 1, 0, 0]), /Empty/);
});

strictTest("readClientHello() refuses a first handshake message that is not a ClientHello", () => {
  assertInvalid(records(helloMessage([sni("shop.example")], 2)), /not a ClientHello/);
  assertInvalid(new Uint8Array([22, 3, 1, 0, 10, 2]), /not a ClientHello/);
});

strictTest("readClientHello() refuses lengths that run past their structure", () => {
  const sniPastExtension = extension(0, [...u16(20), 0, ...vec16(ascii("shop.example"))]);
  assertInvalid(records(helloMessage([sniPastExtension])), /server_name/);
  const namePastList = extension(0, [...u16(15), 0, ...u16(40), ...ascii("shop.example")]);
  assertInvalid(records(helloMessage([namePastList])), /server_name/);
  const extensionPastBlock = helloMessage([[0, 0x17, 0, 9, 1]]);
  assertInvalid(records(extensionPastBlock), /Extension runs past/);
  const suitesPastBody = helloMessage(null);
  suitesPastBody[4 + 2 + 32 + 1 + 32] = 0x70;
  assertInvalid(records(suitesPastBody), /cipher_suites/);
  const longSessionId = helloMessage(null);
  longSessionId[4 + 2 + 32] = 33;
  assertInvalid(records(longSessionId), /legacy_session_id/);
  const bytesAfterExtensions = helloMessage(null);
  bytesAfterExtensions.push(0, 4, 0, 0x17, 0, 0, 0xff);
  bytesAfterExtensions.splice(1, 3, ...u24(bytesAfterExtensions.length - 4));
  assertInvalid(records(bytesAfterExtensions), /extensions length/);
});

strictTest("readClientHello() refuses a host name with a space, a NUL or a bad length", () => {
  for (const name of ["shop example", "shop\0.example", "shop_example", ".", "", "ä.example"]) {
    assertInvalid(records(helloMessage([sni(ascii(name))])), /server_name|host_name/);
  }
  assertInvalid(records(helloMessage([sni("a".repeat(256))])), /host_name/);
  const longest = "a".repeat(63) + "." + "b".repeat(63) + "." + "c".repeat(63) + "." +
    "d".repeat(63);
  assert.deepEqual(readClientHello(records(helloMessage([sni(longest)]))), {
    kind: "hello",
    serverName: longest,
  });
});

strictTest("readClientHello() refuses duplicate extensions and duplicate host names", () => {
  assertInvalid(
    records(helloMessage([sni("a.example"), SUPPORTED_VERSIONS, sni("b.example")])),
    /Duplicate/,
  );
  assertInvalid(records(helloMessage([SUPPORTED_VERSIONS, SUPPORTED_VERSIONS])), /Duplicate/);
  const twoNames = extension(
    0,
    vec16([0, ...vec16(ascii("a.example")), 0, ...vec16(ascii("b.example"))]),
  );
  assertInvalid(records(helloMessage([twoNames])), /More than one host_name/);
});

strictTest(
  "readClientHello() refuses a hello over the size cap as soon as its length is known",
  () => {
    const padding = extension(21, new Array(40_000).fill(0));
    const big = records(helloMessage([sni("shop.example"), padding]), [16384, 16384]);
    assertInvalid(big.subarray(0, 9), /too large/);
    assertInvalid(big, /too large/);
    const small = shopHello();
    assert.equal(readClientHello(small, small.length).kind, "hello");
    assertInvalid(small, /too large/, small.length - 1);
    // Tiny records: the cap counts record headers, so "incomplete" never needs more bytes than it.
    const message = helloMessage([sni("shop.example")]);
    const fragmented = records(message, new Array(60).fill(1));
    assert.equal(readClientHello(fragmented, fragmented.length).kind, "hello");
    const cap = 200;
    for (let length = 0; length <= fragmented.length; length++) {
      const result = readClientHello(fragmented.subarray(0, length), cap);
      if (result.kind !== "incomplete") assert.match(JSON.stringify(result), /too large/);
      else assert.ok(length <= cap, `incomplete at ${length} bytes`);
    }
  },
);

strictTest("readClientHello() refuses a hello split over more than 64 records", () => {
  const message = helloMessage([sni("shop.example")]);
  assert.equal(readClientHello(records(message, new Array(63).fill(1))).kind, "hello");
  assertInvalid(records(message, new Array(64).fill(1)), /too many records/);
});

// ---- Fuzzing ----

/** The length fields of a single-record hello: record, handshake, vectors, extensions, SNI. */
function lengthFields(bytes: Uint8Array): { offset: number; width: number }[] {
  const fields = [{ offset: 3, width: 2 }, { offset: 6, width: 3 }];
  const u16At = (at: number) => (bytes[at] << 8) | bytes[at + 1];
  let at = 9 + 2 + 32;
  fields.push({ offset: at, width: 1 });
  at += 1 + bytes[at];
  fields.push({ offset: at, width: 2 });
  at += 2 + u16At(at);
  fields.push({ offset: at, width: 1 });
  at += 1 + bytes[at];
  if (at >= bytes.length) return fields;
  fields.push({ offset: at, width: 2 });
  for (at += 2; at + 4 <= bytes.length; at += 4 + u16At(at + 2)) {
    fields.push({ offset: at + 2, width: 2 });
    if (u16At(at) === 0) {
      fields.push({ offset: at + 4, width: 2 }, { offset: at + 7, width: 2 });
    }
  }
  return fields;
}

/** One random mutation: byte flips, a corrupted length field, inserted or deleted bytes. */
function mutate(base: Uint8Array, random: () => number): Uint8Array {
  const pick = (n: number) => Math.floor(random() * n);
  const bytes = [...base];
  switch (pick(4)) {
    case 0:
      for (let flips = 1 + pick(4); flips > 0; flips--) bytes[pick(bytes.length)] ^= 1 + pick(255);
      break;
    case 1: {
      const fields = lengthFields(base);
      const { offset, width } = fields[pick(fields.length)];
      let value = 0;
      for (let i = 0; i < width; i++) value = value * 256 + bytes[offset + i];
      value = random() < 0.5 ? value + pick(9) - 4 : pick(256 ** width);
      for (let i = width - 1; i >= 0; i--, value = Math.floor(value / 256)) {
        bytes[offset + i] = ((value % 256) + 256) % 256;
      }
      break;
    }
    case 2:
      bytes.splice(
        pick(bytes.length + 1),
        0,
        ...Array.from({ length: 1 + pick(8) }, () => pick(256)),
      );
      break;
    default:
      bytes.splice(pick(bytes.length), 1 + pick(8));
  }
  return new Uint8Array(bytes);
}

/** Asserts `result` is exactly one of the three documented shapes. */
function assertShape(result: HelloResult): void {
  const keys = Object.keys(result).sort();
  if (result.kind === "incomplete") assert.deepEqual(keys, ["kind"]);
  else if (result.kind === "invalid") {
    assert.deepEqual(keys, ["kind", "reason"]);
    assert.ok(typeof result.reason === "string" && result.reason.length > 0);
  } else {
    assert.equal(result.kind, "hello");
    if (result.serverName === undefined) assert.deepEqual(keys, ["kind"]);
    else assert.match(result.serverName, /^[a-z0-9.-]{0,254}[a-z0-9-]$/);
  }
}

/** Captured and hand-built hellos to fuzz from: TLS 1.3, TLS 1.2, no SNI, upper case. */
async function fuzzBases(): Promise<Uint8Array[]> {
  return [
    await captureClientHello({ servername: "shop.example", minVersion: "TLSv1.3" }),
    await captureClientHello({ servername: "shop.example", maxVersion: "TLSv1.2" }),
    await captureClientHello({ servername: "" }),
    records(helloMessage([sni("WWW.Shop.Example"), SUPPORTED_VERSIONS])),
  ];
}

strictTest("readClientHello() finds every truncation of a valid hello incomplete", async () => {
  const bases = await fuzzBases();
  const names = ["shop.example", "shop.example", undefined, "www.shop.example"];
  bases.forEach((base, i) => assertPrefixesIncomplete(base, names[i]));
  assertPrefixesIncomplete(records([...bases[0].subarray(5)], [3, 50, 1]), "shop.example");
});

strictTest(
  "readClientHello() never throws and keeps its verdicts on 20,000 seeded mutations",
  async () => {
    const bases = await fuzzBases();
    const random = mulberry32(0x5eed);
    const seen = { incomplete: 0, hello: 0, invalid: 0 };
    for (let i = 0; i < 20_000; i++) {
      const mutated = mutate(bases[i % bases.length], random);
      let result: HelloResult;
      try {
        result = readClientHello(mutated);
      } catch (error) {
        throw new Error(`Mutation ${i} threw on ${Array.from(mutated)}`, { cause: error });
      }
      assertShape(result);
      seen[result.kind]++;
      // More bytes never change a verdict: a prefix's hello or invalid holds for the whole.
      const prefix = readClientHello(mutated.subarray(0, Math.floor(random() * mutated.length)));
      if (prefix.kind !== "incomplete") assert.deepEqual(result, prefix, `mutation ${i}`);
    }
    assert.ok(seen.incomplete > 0 && seen.hello > 0 && seen.invalid > 0, JSON.stringify(seen));
  },
);
