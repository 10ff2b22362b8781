/**
 * The one place a {@link Reply} becomes bytes: status, headers (with the request id), and a fixed
 * body or a streamed file. A file is streamed with backpressure, so a slow reader holds its
 * reservation rather than gateway memory.
 *
 * @module
 */
import { createReadStream } from "node:fs";
import { stat } from "node:fs/promises";
import type { ServerResponse } from "node:http";
import { failureReply } from "../proxy/errors.ts";
import type { Reply } from "./reply.ts";

/**
 * Writes a reply.
 *
 * @param response the node response to write to
 * @param reply what to send
 * @param extra headers the server adds (request id, connection)
 */
export function writeReply(
  response: ServerResponse,
  reply: Reply,
  extra: Record<string, string>,
): void {
  if (reply.stream) {
    // rawHeaders already carry the request id (hygiene sets it); add only a connection close.
    const headers = extra.connection
      ? [...(reply.rawHeaders ?? []), "connection", extra.connection]
      : reply.rawHeaders ?? [];
    response.writeHead(reply.status, headers as string[]);
    reply.stream.pipeTo(response);
    return;
  }
  if (reply.file !== undefined) {
    streamFile(response, reply, reply.file, extra);
    return;
  }
  const body = reply.body ?? "";
  const length = typeof body === "string" ? Buffer.byteLength(body) : body.byteLength;
  response.writeHead(reply.status, {
    ...reply.headers,
    ...extra,
    "content-length": String(length),
  });
  response.end(body);
}

function streamFile(
  response: ServerResponse,
  reply: Reply,
  file: string,
  extra: Record<string, string>,
): void {
  stat(file).then((info) => {
    if (response.destroyed) return;
    response.writeHead(reply.status, {
      ...reply.headers,
      ...extra,
      "content-length": String(info.size),
    });
    if (response.req.method === "HEAD") {
      response.end();
      return;
    }
    const stream = createReadStream(file, { highWaterMark: 16 * 1024 });
    stream.on("error", () => response.destroy());
    response.on("close", () => stream.destroy());
    stream.pipe(response);
  }, () => {
    if (response.destroyed || response.headersSent) return;
    writeReply(response, failureReply("internal_error", extra["x-request-id"] ?? ""), extra);
  });
}
