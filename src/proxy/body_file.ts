/**
 * A respond route's body file, served per request. The file is opened through the rooted read at
 * every request (config/rooted_read.ts), never trusted from load: a body file swapped for a symlink
 * to a file outside the tenants folder after load is refused, and the refusal (which names the
 * file, never its bytes) is thrown for the lane server to log and answer with a 500 envelope.
 *
 * The reply streams from the handle that was checked — nothing reopens the path — and carries
 * exactly the size `fstat` gave: a file that grows meanwhile cannot send more bytes than its
 * Content-Length framed, and one that shrinks cuts the response off (HTTP/1.1 truncation). The
 * handle is closed when the body ends, the client leaves, or the reply is never sent (`cancel`).
 *
 * @module
 */
import { openRooted } from "../config/rooted_read.ts";
import type { Reply } from "../request/reply.ts";
import type { RespondAction } from "./actions.ts";
import type { StreamedBody } from "../request/body_stream.ts";

/** Bytes read from the file per write. */
const CHUNK_BYTES = 16 * 1024;

/**
 * Opens a respond action's body file and answers with it.
 *
 * @param action a respond action with `file` and `root`
 * @param method the request method: a HEAD reply says the length and sends no byte
 * @throws {RootedReadError} when the file is refused (outside the root, not a regular file, …)
 */
export async function bodyFileReply(action: RespondAction, method: string): Promise<Reply> {
  if (action.file === undefined || action.root === undefined) {
    throw new TypeError("A body file reply needs the action's file and root");
  }
  const opened = await openRooted(action.root, action.file);
  const size = opened.info.size;
  return {
    status: action.status,
    headers: { ...action.headers, "content-length": String(size) },
    stream: fileBody(opened.handle, method === "HEAD" ? 0 : size),
  };
}

/** A body streamed from an open file: `size` bytes at most, with backpressure. */
function fileBody(handle: Deno.FsFile, size: number): StreamedBody {
  let open = true;
  const close = () => {
    if (!open) return;
    open = false;
    handle.close();
  };
  return {
    pipeTo(target) {
      let gone = false;
      target.once("close", () => gone = true);
      pump(handle, size, target, () => gone).then(
        (whole) => {
          close();
          if (whole) target.end();
          else target.destroy();
        },
        () => {
          close();
          target.destroy();
        },
      );
    },
    cancel: close,
  };
}

type Target = Parameters<StreamedBody["pipeTo"]>[0];

/** Copies `size` bytes; false when the file ended early or the client left. */
async function pump(
  handle: Deno.FsFile,
  size: number,
  target: Target,
  gone: () => boolean,
): Promise<boolean> {
  let left = size;
  while (left > 0) {
    if (gone()) return false;
    const chunk = new Uint8Array(Math.min(left, CHUNK_BYTES));
    const read = await handle.read(chunk);
    if (read === null) return false;
    left -= read;
    if (!target.write(read === chunk.length ? chunk : chunk.subarray(0, read))) {
      await drained(target);
    }
  }
  return !gone();
}

/** Resolves once the target drains or closes. */
function drained(target: Target): Promise<void> {
  return new Promise((resolve) => {
    const done = () => {
      target.removeListener("drain", done);
      target.removeListener("close", done);
      resolve();
    };
    target.once("drain", done);
    target.once("close", done);
  });
}
