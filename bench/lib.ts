/**
 * Shared pieces of the benchmark scripts: free ports, child processes that say "ready", wrk runs,
 * medians and markdown rows. Loopback only.
 *
 * @module
 */
import http from "node:http";
import { stringify } from "yaml";

/** The repository root. */
export const ROOT = new URL("../", import.meta.url).pathname;

/** One wrk result. */
export interface WrkResult {
  readonly rps: number;
  readonly p50: number;
  readonly p99: number;
  /** Transfer per second in MB (10^6 bytes). */
  readonly mbps: number;
  readonly non2xx: number;
  /** Requests completed in the run. */
  readonly requests: number;
}

/** A free loopback port (bound once, then released). */
export function freePort(): number {
  for (;;) {
    const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
    const port = (listener.addr as Deno.NetAddr).port;
    listener.close();
    // The kernel may hand a just-closed port out again: never give one twice in a run.
    if (given.has(port)) continue;
    given.add(port);
    return port;
  }
}

/** Ports {@link freePort} handed out in this run. */
const given = new Set<number>();

/** True when `command` runs (`--version`-style probe). */
export async function has(command: string, args: string[] = ["--version"]): Promise<boolean> {
  try {
    await new Deno.Command(command, { args, stdout: "null", stderr: "null" }).output();
    return true;
  } catch {
    return false;
  }
}

/** The Debian package of a tool whose package has another name. */
const PACKAGE_OF: Readonly<Record<string, string>> = { "redis-cli": "redis-tools" };

/**
 * True when every tool answers its probe arguments; otherwise says which are missing and how to
 * install them, for the benchmark `bench` to skip.
 */
export async function haveTools(
  bench: string,
  tools: Readonly<Record<string, readonly string[]>>,
): Promise<boolean> {
  const missing = [];
  for (const [tool, args] of Object.entries(tools)) {
    if (!await has(tool, [...args])) missing.push(tool);
  }
  if (missing.length === 0) return true;
  const packages = missing.map((tool) => PACKAGE_OF[tool] ?? tool).join(" ");
  console.error(
    `${bench}: missing ${missing.join(", ")} (apt-get install -y ${packages}); skipped`,
  );
  return false;
}

/**
 * Spawns a command and waits until its stderr or stdout contains `ready` (or, when `port` is given,
 * until the port accepts connections).
 */
export async function spawnReady(
  command: string,
  args: string[],
  options: { port?: number; env?: Record<string, string> } = {},
): Promise<Deno.ChildProcess> {
  const child = new Deno.Command(command, {
    args,
    stderr: "piped",
    stdout: "piped",
    env: options.env,
  }).spawn();
  const drain = async (stream: ReadableStream<Uint8Array>, onText?: (t: string) => void) => {
    const reader = stream.pipeThrough(new TextDecoderStream()).getReader();
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      onText?.(value);
    }
  };
  let seen = "";
  let ready!: () => void;
  const signalled = new Promise<void>((resolve) => ready = resolve);
  const watch = (text: string) => {
    seen += text;
    if (/ready/.test(seen)) ready();
  };
  drain(child.stderr, watch);
  drain(child.stdout, watch);
  const until = Date.now() + 20_000;
  if (options.port !== undefined) {
    for (;;) {
      try {
        (await Deno.connect({ hostname: "127.0.0.1", port: options.port })).close();
        break;
      } catch {
        if (Date.now() > until) throw new Error(`${command} did not listen: ${seen}`);
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
    }
  } else {
    const timeout = new Promise<never>((_, reject) =>
      setTimeout(() => reject(new Error(`${command} not ready: ${seen}`)), 20_000)
    );
    await Promise.race([signalled, timeout]);
  }
  return child;
}

/** Starts nginx on `config` (its error log beside it) and waits until `port` accepts. */
export function startNginx(config: string, port: number): Promise<Deno.ChildProcess> {
  return spawnReady("nginx", ["-c", config, "-e", `${config}.error.log`], { port });
}

/** Starts microsocks on loopback `port` and waits until it accepts. */
export function startMicrosocks(port: number): Promise<Deno.ChildProcess> {
  return spawnReady("microsocks", ["-i", "127.0.0.1", "-p", String(port)], { port });
}

/** Stops children (SIGTERM, then waits). */
export async function stopAll(children: Deno.ChildProcess[]): Promise<void> {
  for (const child of children) {
    try {
      child.kill("SIGTERM");
    } catch { /* gone */ }
  }
  await Promise.all(children.map((child) => child.status));
}

/** Runs wrk and parses its summary. */
export async function wrk(
  url: string,
  options: { seconds: number; connections: number; headers?: string[] },
): Promise<WrkResult> {
  const headers = (options.headers ?? []).flatMap((h) => ["-H", h]);
  const args = [
    "-t2",
    `-c${options.connections}`,
    `-d${options.seconds}s`,
    "--latency",
    ...headers,
    url,
  ];
  const out = await new Deno.Command("wrk", { args, stdout: "piped", stderr: "piped" }).output();
  const text = new TextDecoder().decode(out.stdout);
  const rps = Number(/Requests\/sec:\s+([\d.]+)/.exec(text)?.[1]);
  const ms = (label: string) => {
    const match = new RegExp(`\\s${label}%\\s+([\\d.]+)(us|ms|s)`).exec(text);
    if (!match) return NaN;
    const scale = match[2] === "us" ? 0.001 : match[2] === "s" ? 1000 : 1;
    return Number(match[1]) * scale;
  };
  const transfer = /Transfer\/sec:\s+([\d.]+)(B|KB|MB|GB)/.exec(text);
  const unit = { B: 1e-6, KB: 1.024e-3, MB: 1.048576, GB: 1073.741824 } as const;
  const mbps = transfer ? Number(transfer[1]) * unit[transfer[2] as keyof typeof unit] : NaN;
  const non2xx = Number(/Non-2xx or 3xx responses:\s+(\d+)/.exec(text)?.[1] ?? 0);
  const requests = Number(/(\d+) requests in/.exec(text)?.[1]);
  if (!Number.isFinite(rps)) throw new Error(`wrk output not understood:\n${text}`);
  return { rps, p50: ms("50"), p99: ms("99"), mbps, non2xx, requests };
}

/** The median of a list. */
export function median(values: readonly number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)];
}

/**
 * Starts `main.ts serve <dir>/config.yaml` under `flags` (and any V8 flags) and waits until it
 * says it is ready.
 */
export function spawnGateway(
  dir: string,
  flags: readonly string[],
  v8: readonly string[] = [],
  root: string = ROOT,
): Promise<Deno.ChildProcess> {
  return spawnReady(Deno.execPath(), [
    "run",
    "--no-prompt",
    ...flags,
    ...v8,
    `${root}main.ts`,
    "serve",
    `${dir}/config.yaml`,
  ]);
}

/**
 * Writes a gateway config and tenants into `dir`, and returns the flags `main.ts flags` derives.
 * An `egress` without `allow_private` gets loopback allowed (the benchmarks' upstreams).
 */
export async function writeGateway(
  dir: string,
  config: Record<string, unknown>,
  tenants: Record<string, unknown>[],
  root: string = ROOT,
): Promise<string[]> {
  await Deno.mkdir(`${dir}/tenants`, { recursive: true });
  const egress = config.egress as Record<string, unknown> | undefined;
  if (egress && !("allow_private" in egress)) {
    // Benchmark upstreams live on loopback, which the egress refuses unless it is allowed.
    config = { ...config, egress: { ...egress, allow_private: ["127.0.0.0/8", "::1"] } };
  }
  await Deno.writeTextFile(`${dir}/config.yaml`, stringify(config));
  for (const tenant of tenants) {
    await Deno.writeTextFile(`${dir}/tenants/${tenant.host}.yaml`, stringify(tenant));
  }
  const out = await new Deno.Command(Deno.execPath(), {
    args: [
      "run",
      "--allow-read",
      "--ignore-env=LOG_STREAM,LOG_TOKENS",
      `${root}main.ts`,
      "flags",
      `${dir}/config.yaml`,
    ],
    stdout: "piped",
    stderr: "piped",
  }).output();
  if (out.code !== 0) throw new Error(new TextDecoder().decode(out.stderr));
  return new TextDecoder().decode(out.stdout).trim().split(" ");
}

/**
 * CPU seconds (user + system) a process has used so far, from `/proc/<pid>/stat` (Linux; clock
 * ticks of 1/100 s), read with `cat` since Deno wants full access for /proc. Per-request CPU is
 * steadier than requests per second on a shared machine.
 */
export async function cpuSecondsOf(pid: number): Promise<number> {
  const out = await new Deno.Command("cat", { args: [`/proc/${pid}/stat`], stdout: "piped" })
    .output();
  const stat = new TextDecoder().decode(out.stdout);
  // Fields after the command name (which may hold spaces) start at field 3 (state).
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  return (Number(fields[11]) + Number(fields[12])) / 100;
}

/** A process's resident set size in bytes (`ps`; Deno needs full access to read /proc). */
export async function rssOf(pid: number): Promise<number> {
  const out = await new Deno.Command("ps", {
    args: ["-o", "rss=", "-p", String(pid)],
    stdout: "piped",
  })
    .output();
  return Number(new TextDecoder().decode(out.stdout).trim()) * 1024;
}

/**
 * An nginx config serving the benchmark upstream on `port`: `/small` answers 64 bytes, anything
 * else is a file under `www` (`big` is 1 MiB, `huge` 1 GiB).
 *
 * @param state a folder for nginx's pid, logs and temp files
 * @param root the folder holding `www`
 */
export function nginxUpstreamConfig(state: string, root: string, port: number): string {
  return `worker_processes 1;
daemon off;
pid ${state}/nginx.pid;
error_log ${state}/nginx-error.log;
events { worker_connections 4096; }
http {
  access_log off;
  keepalive_requests 1000000;
  client_body_temp_path ${state}/body;
  proxy_temp_path ${state}/proxy;
  fastcgi_temp_path ${state}/fastcgi;
  uwsgi_temp_path ${state}/uwsgi;
  scgi_temp_path ${state}/scgi;
  server {
    listen 127.0.0.1:${port};
    client_max_body_size 2g;
    location = /small { default_type text/plain; return 200 "${"x".repeat(64)}"; }
    location / { root ${root}/www; }
  }
}
`;
}

/**
 * Runs `work` while sampling `pid`'s RSS every 50 ms.
 *
 * @returns what `work` returned, its seconds, and the RSS before and at its peak (bytes)
 */
export async function peakRss<T>(
  pid: number,
  work: () => Promise<T>,
): Promise<{ value: T; seconds: number; before: number; peak: number }> {
  const before = await rssOf(pid);
  let peak = before;
  let sampling = true;
  const sampler = (async () => {
    while (sampling) {
      peak = Math.max(peak, await rssOf(pid));
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
  })();
  const started = performance.now();
  try {
    const value = await work();
    return { value, seconds: (performance.now() - started) / 1000, before, peak };
  } finally {
    sampling = false;
    await sampler;
  }
}

/** GETs the 1 GiB file through a gateway (`Host: bench.test`), discarding it; returns the bytes. */
export function download(port: number): Promise<number> {
  return new Promise((resolve, reject) => {
    const request = http.get({
      host: "127.0.0.1",
      port,
      path: "/huge",
      headers: { host: "bench.test" },
    }, (response) => {
      let total = 0;
      response.on("data", (chunk: Uint8Array) => total += chunk.byteLength);
      response.on(
        "end",
        () =>
          total === 1024 ** 3 ? resolve(total) : reject(new Error(`download got ${total} bytes`)),
      );
      response.on("error", reject);
    });
    request.on("error", reject);
  });
}

/**
 * The edge config the proxy-chain benchmarks run: public and local_health on loopback, a ledger
 * roomy enough that admission never shapes a run, and the egress each benchmark gives.
 */
export function benchEdgeConfig(
  ports: { readonly gateway: number; readonly local: number },
  egress: Record<string, unknown>,
  extra: Record<string, unknown> = {},
): Record<string, unknown> {
  return {
    node_id: "bench-edge",
    mode: "local",
    tenants_dir: "tenants",
    lanes: {
      public: { listen: [{ hostname: "127.0.0.1", port: ports.gateway }] },
      local_health: { listen: [{ hostname: "127.0.0.1", port: ports.local }] },
    },
    timeouts: { header_ms: 10000, idle_ms: 30000, request_ms: 600000 },
    ledger: {
      application_slots: 1024,
      inflight_bytes: 1 << 30,
      per_connection: 8,
      lanes: { public: { deadline_ms: 60000 } },
    },
    ...extra,
    egress,
  };
}

/**
 * A process's resident set size in bytes, from `VmRSS` in `/proc/<pid>/status` (Linux), read with
 * `cat` since Deno wants full access for /proc. Counts every isolate of a gateway with workers.
 *
 * @returns the bytes, or NaN once the process is gone
 */
export async function vmRssOf(pid: number): Promise<number> {
  const out = await new Deno.Command("cat", {
    args: [`/proc/${pid}/status`],
    stdout: "piped",
    stderr: "null",
  }).output();
  const kb = /VmRSS:\s+(\d+) kB/.exec(new TextDecoder().decode(out.stdout))?.[1];
  return kb === undefined ? NaN : Number(kb) * 1024;
}

/** RSS samples of one process, taken in the background until `stop()`. */
export interface RssSampler {
  /** The latest sample (bytes). */
  readonly last: number;
  /** The highest sample since the sampler started or since `resetPeak()` (bytes). */
  readonly peak: number;
  /** Makes the latest sample the peak, so `peak` covers what follows. */
  resetPeak(): void;
  /** Stops sampling (waits for the sample in progress). */
  stop(): Promise<void>;
}

/**
 * Samples `pid`'s VmRSS every `everyMs` ({@link vmRssOf}); resolves once the first sample is in.
 *
 * @param everyMs the pause between samples (each sample also costs a `cat`, a few ms)
 */
export async function sampleRss(pid: number, everyMs = 100): Promise<RssSampler> {
  let last = await vmRssOf(pid);
  let peak = last;
  let running = true;
  const loop = (async () => {
    while (running) {
      await new Promise((resolve) => setTimeout(resolve, everyMs));
      const rss = await vmRssOf(pid);
      if (Number.isNaN(rss)) return;
      last = rss;
      peak = Math.max(peak, rss);
    }
  })();
  return {
    get last() {
      return last;
    },
    get peak() {
      return peak;
    },
    resetPeak() {
      peak = last;
    },
    async stop() {
      running = false;
      await loop;
    },
  };
}

/** What {@link curlThrough} saw: the status, the body bytes, and the body when it was kept. */
export interface CurlResult {
  readonly status: number;
  readonly bytes: number;
  readonly body: string;
}

/**
 * One `curl` request (`Host: bench.test` unless `host` says otherwise); the body goes to
 * /dev/null unless `keep`. A C client, so the load generator does not share the bench's event loop.
 *
 * @param args more curl arguments, e.g. `["-X", "POST", "-T", file]`
 */
export async function curlThrough(
  url: string,
  options: { readonly args?: readonly string[]; readonly host?: string; readonly keep?: boolean } =
    {},
): Promise<CurlResult> {
  const out = await new Deno.Command("curl", {
    args: [
      "-sS",
      ...["-H", `Host: ${options.host ?? "bench.test"}`],
      ...["-o", options.keep ? "-" : "/dev/null"],
      ...["-w", "\n%{http_code} %{size_download}"],
      ...options.args ?? [],
      url,
    ],
    stdout: "piped",
    stderr: "piped",
  }).output();
  const text = new TextDecoder().decode(out.stdout);
  const end = text.lastIndexOf("\n");
  const [status, bytes] = text.slice(end + 1).split(" ").map(Number);
  return { status, bytes, body: text.slice(0, Math.max(end, 0)) };
}

/** A loopback upstream that reads each request body to the end, then answers its byte count. */
export function discardSink(): Deno.HttpServer<Deno.NetAddr> {
  return Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, async (request) => {
    let bytes = 0;
    if (request.body) { for await (const chunk of request.body) bytes += chunk.byteLength; }
    return new Response(String(bytes));
  });
}
