/**
 * The small JSON bodies the hub's api takes (registration and renewal): one object of at most
 * {@link MAX_BODY} bytes, read from the request; a longer body is read and dropped up to a cap,
 * beyond which the connection is cut, so the refusal can still be answered.
 *
 * @module
 */
import type { IncomingMessage } from "node:http";

/** Bodies are a node id, a type, a secret and a PEM request: a few KiB at most. */
const MAX_BODY = 32 * 1024;
/** A longer body is read and dropped up to this size, then the connection is cut. */
const DRAIN_CAP = 1024 * 1024;

/**
 * The request's body as a JSON object: at most {@link MAX_BODY} bytes, or none (too long, not
 * JSON, not an object). Reading stops at the limit.
 */
export async function readJsonBody(
  request: IncomingMessage,
): Promise<Record<string, unknown> | undefined> {
  const chunks: Uint8Array[] = [];
  let size = 0;
  for await (const chunk of request) {
    size += (chunk as Uint8Array).byteLength;
    // Past the limit the rest is read and dropped (so the refusal can be answered), up to a cap
    // beyond which the connection is cut.
    if (size > DRAIN_CAP) {
      request.destroy();
      return undefined;
    }
    if (size <= MAX_BODY) chunks.push(chunk as Uint8Array);
  }
  if (size > MAX_BODY) return undefined;
  try {
    const value = JSON.parse(new TextDecoder().decode(concat(chunks, size)));
    return typeof value === "object" && value !== null && !Array.isArray(value) ? value : undefined;
  } catch {
    return undefined;
  }
}

function concat(chunks: readonly Uint8Array[], size: number): Uint8Array {
  const all = new Uint8Array(size);
  let offset = 0;
  for (const chunk of chunks) {
    all.set(chunk, offset);
    offset += chunk.byteLength;
  }
  return all;
}
