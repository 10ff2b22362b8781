/**
 * One HTTP/2 request with a real HTTP/2 client (`node:http2`, nghttp2 underneath), made in a `deno
 * run` process of its own. Deno 2.9.6's nghttp2 has aborted a process (`free(): invalid pointer`,
 * `find_stream_on_goaway_func: Assertion ... failed`; docs/decisions.md §8): a client in the test
 * process would take the whole `deno test` run — every later test and the summary — down with it.
 * In a child, an abort is one failed check that names the exit code and the child's stderr.
 *
 * As a script: `deno run --allow-net=127.0.0.1 h2_child.ts '<request as JSON>'` prints the
 * {@link H2Answer} as one JSON line on stdout.
 *
 * @module
 */
import type { Buffer } from "node:buffer";
import http2 from "node:http2";
import tls from "node:tls";

/** The request: a GET of `path` with `:authority` `servername`, over TLS with ALPN `h2` only. */
export interface H2Ask {
  readonly port: number;
  readonly servername: string;
  /** CAs (PEM) the server's chain and name are checked against. */
  readonly ca: readonly string[];
  readonly path: string;
}

/** What the child got back. */
export interface H2Answer {
  readonly status: number;
  readonly body: string;
  /** The protocol ALPN settled on (false: none). */
  readonly alpn: string | false;
}

/** How long the child may take before it is killed and the check fails. */
const CHILD_MS = 10_000;

/**
 * Makes the request in a child process.
 *
 * @throws {Error} when the child fails or crashes (its exit code, signal and stderr), or does not
 *   finish within 10 s
 */
export async function h2InChild(ask: H2Ask): Promise<H2Answer> {
  const child = new Deno.Command(Deno.execPath(), {
    args: [
      "run",
      "--no-prompt",
      "--allow-net=127.0.0.1",
      new URL(import.meta.url).pathname,
      JSON.stringify(ask),
    ],
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
    env: { NO_COLOR: "1" },
  }).spawn();
  let timedOut = false;
  const timer = setTimeout(() => {
    timedOut = true;
    child.kill("SIGKILL");
  }, CHILD_MS);
  const output = await child.output();
  clearTimeout(timer);
  const stdout = new TextDecoder().decode(output.stdout).trim();
  const stderr = new TextDecoder().decode(output.stderr).trim();
  if (timedOut) throw new Error(`The HTTP/2 client child did not finish in ${CHILD_MS} ms`);
  if (!output.success) {
    const signal = output.signal ? ` (${output.signal})` : "";
    throw new Error(
      `The HTTP/2 client child exited with code ${output.code}${signal}; stderr:\n${stderr}`,
    );
  }
  return JSON.parse(stdout) as H2Answer;
}

/** The request, made here with `node:http2`. */
function ask(request: H2Ask): Promise<H2Answer> {
  return new Promise((resolve, reject) => {
    const session = http2.connect(`https://${request.servername}:${request.port}`, {
      createConnection: () =>
        tls.connect({
          host: "127.0.0.1",
          port: request.port,
          servername: request.servername,
          ca: [...request.ca],
          ALPNProtocols: ["h2"],
        }),
    });
    const fail = (error: Error) => {
      session.destroy();
      reject(error);
    };
    session.once("error", fail);
    const stream = session.request({ ":path": request.path });
    stream.once("error", fail);
    let status = 0;
    const chunks: Buffer[] = [];
    stream.once("response", (headers) => status = Number(headers[":status"]));
    stream.on("data", (chunk: Buffer) => chunks.push(chunk));
    stream.once("end", () => {
      const body = chunks.map((chunk) => chunk.toString()).join("");
      const alpn = session.alpnProtocol ?? false;
      session.close(() => resolve({ status, body, alpn }));
    });
  });
}

if (import.meta.main) {
  console.log(JSON.stringify(await ask(JSON.parse(Deno.args[0]) as H2Ask)));
}
