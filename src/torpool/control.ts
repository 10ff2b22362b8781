/**
 * A minimal client for Tor's control protocol (torspec `control-spec.txt` §2–3): one connection,
 * one command at a time, each exchange bounded by a timeout. Replies are parsed per §2.3: any
 * number of `250-` mid lines and `250+` data lines (a block ending in a lone `.`, dot-stuffed)
 * closed by one `250 ` end line; a status of 400 or above is a failure.
 *
 * Written here rather than taken from npm: the packages found (`tor-control`, `granax`) are
 * unmaintained, bring their own process management, and the supervisor needs four commands
 * (PROTOCOLINFO, AUTHENTICATE, GETINFO, QUIT) with a deadline on each, which is this file.
 *
 * @module
 */
import { connect, type Socket } from "node:net";

/** A control exchange that failed: no connection, no answer in time, or a 4xx/5xx reply. */
export class ControlError extends Error {
  /** The reply status when Tor answered with a failure (e.g. 515), undefined otherwise. */
  readonly status: number | undefined;

  constructor(message: string, status?: number) {
    super(message);
    this.name = "ControlError";
    this.status = status;
  }
}

/** One line of a reply: its status, its separator (`-` mid, `+` data, ` ` end) and its text. */
export interface ReplyLine {
  readonly status: number;
  readonly kind: "-" | "+" | " ";
  readonly text: string;
  /** For a `+` line: the data block's lines, un-dot-stuffed. */
  readonly data?: readonly string[];
}

/** A complete reply: the end line's status, and every line in order. */
export interface ControlReply {
  readonly status: number;
  readonly lines: readonly ReplyLine[];
}

/**
 * Splits the control port's bytes into replies. Feed it text as it arrives; it returns each reply
 * once its end line is in.
 *
 * @example
 * ```ts
 * import { ReplyParser } from "./control.ts";
 * const parser = new ReplyParser();
 * parser.push("250-status/circuit-established=0\r\n250 O");
 * const [reply] = parser.push("K\r\n");
 * reply.lines[0].text; // "status/circuit-established=0"
 * ```
 */
export class ReplyParser {
  #partial = "";
  #lines: ReplyLine[] = [];
  #data: { status: number; text: string; lines: string[] } | undefined;

  /**
   * @param chunk the next text from the connection
   * @returns the replies completed by it
   * @throws {ControlError} on a line that is not a reply line
   */
  push(chunk: string): ControlReply[] {
    this.#partial += chunk;
    const done: ControlReply[] = [];
    let end: number;
    while ((end = this.#partial.indexOf("\n")) >= 0) {
      const line = this.#partial.slice(0, end).replace(/\r$/, "");
      this.#partial = this.#partial.slice(end + 1);
      const reply = this.#line(line);
      if (reply) done.push(reply);
    }
    if (this.#partial.length > 65536) throw new ControlError("Control reply line too long");
    return done;
  }

  #line(line: string): ControlReply | undefined {
    if (this.#data) {
      if (line === ".") {
        const { status, text, lines } = this.#data;
        this.#lines.push({ status, kind: "+", text, data: lines });
        this.#data = undefined;
      } else {
        this.#data.lines.push(line.startsWith(".") ? line.slice(1) : line);
      }
      return undefined;
    }
    const match = /^(\d{3})([- +])(.*)$/.exec(line);
    if (!match) throw new ControlError(`Not a control reply line: ${JSON.stringify(line)}`);
    const status = Number(match[1]);
    const kind = match[2] as ReplyLine["kind"];
    if (kind === "+") {
      this.#data = { status, text: match[3], lines: [] };
      return undefined;
    }
    this.#lines.push({ status, kind, text: match[3] });
    if (kind === "-") return undefined;
    const reply = { status, lines: this.#lines };
    this.#lines = [];
    return reply;
  }
}

/** Where to connect, and the bound on each exchange. */
export interface ControlOptions {
  readonly host: string;
  readonly port: number;
  readonly timeoutMs: number;
}

/** One control connection. Commands go one at a time; {@link close} ends it. */
export class ControlConnection {
  readonly #socket: Socket;
  readonly #parser = new ReplyParser();
  readonly #timeoutMs: number;
  #waiting: { resolve: (r: ControlReply) => void; reject: (e: Error) => void } | undefined;
  #failure: Error | undefined;

  private constructor(socket: Socket, timeoutMs: number) {
    this.#socket = socket;
    this.#timeoutMs = timeoutMs;
    socket.setEncoding("latin1");
    socket.on("data", (chunk: string) => this.#receive(chunk));
    socket.on("error", (error) => this.#fail(new ControlError(`Control port: ${error.message}`)));
    socket.on("close", () => this.#fail(new ControlError("Control port closed the connection")));
  }

  /**
   * Connects within the timeout.
   *
   * @throws {ControlError} when the port refuses or does not accept in time
   */
  static open(options: ControlOptions): Promise<ControlConnection> {
    return new Promise((resolve, reject) => {
      const socket = connect({ host: options.host, port: options.port });
      const timer = setTimeout(() => {
        socket.destroy();
        reject(
          new ControlError(
            `Control port ${options.port} did not accept within ` +
              `${options.timeoutMs} ms`,
          ),
        );
      }, options.timeoutMs);
      socket.once("error", (error) => {
        clearTimeout(timer);
        socket.destroy();
        reject(new ControlError(`Control port ${options.port}: ${error.message}`));
      });
      socket.once("connect", () => {
        clearTimeout(timer);
        socket.removeAllListeners("error");
        resolve(new ControlConnection(socket, options.timeoutMs));
      });
    });
  }

  /**
   * Sends one command and waits for its reply.
   *
   * @param command the command line, without CRLF
   * @returns the reply, when its status is below 400
   * @throws {ControlError} on a failure reply, a closed connection or no reply in time
   */
  exchange(command: string): Promise<ControlReply> {
    if (/[\r\n]/.test(command)) throw new TypeError("A control command is one line");
    if (this.#failure) return Promise.reject(this.#failure);
    if (this.#waiting) return Promise.reject(new ControlError("A command is already waiting"));
    const verb = command.split(" ")[0];
    return new Promise<ControlReply>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.#fail(new ControlError(`No reply to ${verb} within ${this.#timeoutMs} ms`));
      }, this.#timeoutMs);
      this.#waiting = {
        resolve: (reply) => {
          clearTimeout(timer);
          if (reply.status >= 400) {
            const text = reply.lines.at(-1)?.text ?? "";
            reject(new ControlError(`${verb} failed: ${reply.status} ${text}`, reply.status));
          } else resolve(reply);
        },
        reject: (error) => {
          clearTimeout(timer);
          reject(error);
        },
      };
      this.#socket.write(`${command}\r\n`);
    });
  }

  /** Ends the connection (idempotent). */
  close(): void {
    this.#fail(new ControlError("Control connection closed"));
  }

  #receive(chunk: string): void {
    let replies: ControlReply[];
    try {
      replies = this.#parser.push(chunk);
    } catch (error) {
      this.#fail(error as Error);
      return;
    }
    for (const reply of replies) {
      const waiting = this.#waiting;
      this.#waiting = undefined;
      // A reply nobody asked for (an asynchronous 650 event) is dropped: no events are set.
      waiting?.resolve(reply);
    }
  }

  #fail(error: Error): void {
    this.#failure ??= error;
    const waiting = this.#waiting;
    this.#waiting = undefined;
    this.#socket.destroy();
    waiting?.reject(this.#failure);
  }
}

/**
 * The `key=value` pairs of a GETINFO reply (a `250+key=` data block joined by newlines).
 *
 * @example
 * ```ts
 * import { getinfoValues } from "./control.ts";
 * getinfoValues({ status: 250, lines: [
 *   { status: 250, kind: "-", text: "status/circuit-established=1" },
 *   { status: 250, kind: " ", text: "OK" },
 * ] }).get("status/circuit-established"); // "1"
 * ```
 */
export function getinfoValues(reply: ControlReply): Map<string, string> {
  const values = new Map<string, string>();
  for (const line of reply.lines) {
    const eq = line.text.indexOf("=");
    if (line.kind === " " || eq < 0) continue;
    const key = line.text.slice(0, eq);
    values.set(key, line.kind === "+" ? (line.data ?? []).join("\n") : line.text.slice(eq + 1));
  }
  return values;
}

/**
 * The `KEY=value` arguments of a reply line, quoted strings unescaped (control-spec §2.1.1).
 *
 * @example
 * ```ts
 * import { keywordArgs } from "./control.ts";
 * keywordArgs('NOTICE BOOTSTRAP PROGRESS=14 SUMMARY="Handshaking with a relay"').get("SUMMARY");
 * // "Handshaking with a relay"
 * ```
 */
export function keywordArgs(text: string): Map<string, string> {
  const args = new Map<string, string>();
  for (const match of text.matchAll(/([A-Za-z_]+)=("(?:[^"\\]|\\.)*"|\S*)/g)) {
    const raw = match[2];
    args.set(
      match[1],
      raw.startsWith('"') ? raw.slice(1, -1).replace(/\\(.)/g, "$1") : raw,
    );
  }
  return args;
}
