/**
 * The hub's credentials, read at boot: the api listener's (its TLS certificate, key and client CA
 * with certificate authentication, or a token book over `api.tokens_dir`), the SOCKS relay's
 * (`transport.socks5_tls`) and the HTTPS tunnel's (`transport.https_tunnel`). Every file is read rooted in its own folder (config/rooted_read.ts), a
 * key as a secret; a file that cannot be read refuses the boot.
 *
 * @module
 */
import type https from "node:https";
import { BootError } from "../boot/boot_error.ts";
import { readNamedFile } from "../config/rooted_read.ts";
import { describeIoError } from "../config/yaml_file.ts";
import { SOCKS5_TLS_WARNING } from "../egress/transport.ts";
import {
  certificateAuth,
  type NodeAuthenticator,
  type RevocationCheck,
  tokenAuth,
} from "./auth.ts";
import type { HubConfig } from "./config.ts";
import { HttpsTunnel } from "./https_tunnel.ts";
import type { Admits } from "./node_streams.ts";
import { type PoolPorts, SocksRelay, staticPool } from "./socks_relay.ts";

/** The api listener's credentials: TLS options and certificate auth, or token files. */
export interface ApiCredentials {
  readonly authenticate: NodeAuthenticator;
  readonly tls?: https.ServerOptions;
}

/**
 * Reads the api listener's credentials: with `api.tls`, its certificate, key and client CA (nodes
 * authenticate by certificate); without, a token book over `api.tokens_dir`.
 *
 * @throws {BootError} when a TLS file cannot be read
 */
export async function readApiCredentials(
  config: HubConfig,
  log: (line: string) => void,
  revocations?: RevocationCheck,
): Promise<ApiCredentials> {
  try {
    if (!config.api.tls) return { authenticate: tokenAuth(config.api.tokensDir!, { log }) };
    const { certFile, keyFile, clientCaFile } = config.api.tls;
    const tls: https.ServerOptions = {
      cert: await readNamedFile(certFile, "api.tls.cert_file", { maxBytes: 1 << 20 }),
      key: await readNamedFile(keyFile, "api.tls.key_file", { maxBytes: 1 << 20, secret: true }),
      ca: await readNamedFile(clientCaFile, "api.tls.client_ca_file", { maxBytes: 1 << 20 }),
      requestCert: true,
      // With the fleet CA a node registers before it has a certificate: the handshake lets it in,
      // and every route but registration refuses a connection the CA did not authorize.
      rejectUnauthorized: config.ca === undefined,
      minVersion: "TLSv1.2",
    };
    return { authenticate: certificateAuth(revocations), tls };
  } catch (error) {
    throw new BootError([`Cannot read the hub's TLS files: ${describeIoError(error)}`]);
  }
}

/**
 * The relay of `transport.socks5_tls` over `pool` (default: the config's static pool), its TLS
 * files read; none when the transport is not configured.
 *
 * @throws {BootError} when a TLS file cannot be read
 */
export async function makeRelay(
  config: HubConfig,
  pool: PoolPorts | undefined,
  log: (line: string) => void,
  revocations?: RevocationCheck,
  admits?: Admits,
): Promise<SocksRelay | undefined> {
  const relay = config.socks5Tls;
  if (!relay) return undefined;
  log(`portcullis: warning: ${config.file}: transport.socks5_tls: ${SOCKS5_TLS_WARNING}`);
  try {
    const read = (file: string, field: string, secret = false) =>
      readNamedFile(file, `transport.socks5_tls.${field}`, { maxBytes: 1 << 20, secret });
    return new SocksRelay({
      pool: pool ?? staticPool(config.pool!.hostname, config.pool!.ports),
      tls: {
        cert: await read(relay.certFile, "cert_file"),
        key: await read(relay.keyFile, "key_file", true),
        ca: await read(relay.clientCaFile, "client_ca_file"),
      },
      nodes: config.api.nodes,
      alpn: relay.alpn,
      revocations,
      admits,
      maxStreamMs: config.maxStreamMs,
      timeoutMs: config.timeouts.headerMs,
      log,
    });
  } catch (error) {
    throw new BootError([`Cannot read the hub's socks5_tls files: ${describeIoError(error)}`]);
  }
}

/** The HTTPS tunnel endpoint: its upgrade handler, and its listener's TLS options. */
export interface TunnelEndpoint {
  readonly tunnel: HttpsTunnel;
  readonly tls: https.ServerOptions;
}

/**
 * The tunnel of `transport.https_tunnel` over `pool` (default: the config's static pool), its TLS
 * files read; none when the transport is not configured. Nodes authenticate by certificate only.
 *
 * @throws {BootError} when a TLS file cannot be read
 */
export async function makeTunnel(
  config: HubConfig,
  pool: PoolPorts | undefined,
  log: (line: string) => void,
  revocations?: RevocationCheck,
  admits?: Admits,
): Promise<TunnelEndpoint | undefined> {
  const endpoint = config.httpsTunnel;
  if (!endpoint) return undefined;
  try {
    const read = (file: string, field: string, secret = false) =>
      readNamedFile(file, `transport.https_tunnel.${field}`, { maxBytes: 1 << 20, secret });
    const tls: https.ServerOptions = {
      cert: await read(endpoint.certFile, "cert_file"),
      key: await read(endpoint.keyFile, "key_file", true),
      ca: await read(endpoint.clientCaFile, "client_ca_file"),
      requestCert: true,
      rejectUnauthorized: true,
      minVersion: "TLSv1.2",
    };
    const tunnel = new HttpsTunnel({
      pool: pool ?? staticPool(config.pool!.hostname, config.pool!.ports),
      nodes: config.api.nodes,
      revocations,
      admits,
      maxStreamMs: config.maxStreamMs,
      timeoutMs: config.timeouts.headerMs,
      log,
    });
    return { tunnel, tls };
  } catch (error) {
    throw new BootError([`Cannot read the hub's https_tunnel files: ${describeIoError(error)}`]);
  }
}
