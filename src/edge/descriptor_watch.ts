/**
 * What an armed edge does about open-file descriptors: after an exhaustion (EMFILE) its listeners
 * stop accepting, so the watch re-arms them once descriptors are free again (unless the edge is
 * draining), and on every check it writes this isolate's gauges into its stripe of the shared
 * ledger memory. It is started last, once the edge is armed, and stopped by the
 * {@link Lifecycle}'s shutdown.
 *
 * @module
 */
import { relayCollections } from "../request/relay_memory.ts";
import { COUNTER_INDEX, type LedgerMemory } from "../ledger/memory.ts";
import { LOG_STREAMS, type LogOutletStats, standardOutlets } from "../observe/log_outlet.ts";
import { type DescriptorState, DescriptorWatch } from "../server/descriptors.ts";
import { describeListener, nudge, rearm } from "./listeners.ts";
import type { BootContext } from "./boot_context.ts";
import type { Lifecycle } from "./lifecycle.ts";
import { sharesPorts } from "./worker_role.ts";

/**
 * Starts the descriptor watch: after an open-file exhaustion it makes the listeners accept again
 * (unless draining), and on every check it writes this isolate's gauges.
 */
export function watchDescriptors(
  { plan, worker, log }: BootContext,
  life: Lifecycle,
): DescriptorWatch {
  const reusePort = sharesPorts(worker);
  const reportLogs = logReporter();
  const descriptors = new DescriptorWatch({
    canary: plan.config.file,
    log,
    async rearm() {
      if (life.state.admissionStopped) return 0;
      let count = 0;
      for (const grant of life.listening) {
        try {
          await rearm(grant, reusePort);
          count++;
        } catch (error) {
          log(`portcullis: ${describeListener(grant)} could not be re-armed: ${error}`);
        }
      }
      return count;
    },
    nudge() {
      if (life.state.admissionStopped) return;
      for (const grant of life.listening) nudge(grant);
    },
    report: (fds) => {
      reportGauges(life, fds);
      reportLogs(life.ledger.memory);
    },
  });
  descriptors.start();
  void descriptors.check();
  return descriptors;
}

/**
 * Writes upstream sockets, descriptor state and heap into this isolate's share, in its own stripe;
 * /v1/health and /metrics sum the stripes.
 */
function reportGauges({ ledger, egress }: Lifecycle, fds: DescriptorState): void {
  const sockets = egress.sockets();
  const memory = ledger.memory;
  memory.set(COUNTER_INDEX.upstreamActive, sockets.active);
  memory.set(COUNTER_INDEX.upstreamIdle, sockets.idle);
  memory.set(COUNTER_INDEX.upstreamConnecting, sockets.connecting);
  memory.set(COUNTER_INDEX.tunnels, sockets.tunnels);
  memory.set(COUNTER_INDEX.descriptorsExhausted, fds.exhausted ? 1 : 0);
  memory.set(COUNTER_INDEX.descriptorExhaustions, fds.exhaustions);
  memory.set(COUNTER_INDEX.listenerRearms, fds.rearms);
  const heap = Deno.memoryUsage();
  memory.set(COUNTER_INDEX.heapUsed, heap.heapUsed);
  memory.set(COUNTER_INDEX.heapTotal, heap.heapTotal);
  memory.set(COUNTER_INDEX.heapExternal, heap.external);
  memory.set(COUNTER_INDEX.relayCollections, relayCollections.young + relayCollections.quiet);
}

/**
 * Writes this isolate's log counts into its stripe: what was written and dropped since the last
 * report is added (so the counts of a replaced worker go on from its predecessor's), the bytes
 * queued now are set.
 */
function logReporter(): (memory: LedgerMemory) => void {
  const outlets = standardOutlets();
  const last = new Map<string, LogOutletStats>();
  return function reportLogs(memory) {
    LOG_STREAMS.forEach((stream, index) => {
      const now = outlets[stream].stats;
      const before = last.get(stream) ?? { written: 0, dropped: 0, episodes: 0, queuedBytes: 0 };
      memory.add(COUNTER_INDEX.logWritten(index), now.written - before.written);
      memory.add(COUNTER_INDEX.logDropped(index), now.dropped - before.dropped);
      memory.add(COUNTER_INDEX.logEpisodes(index), now.episodes - before.episodes);
      memory.set(COUNTER_INDEX.logQueued(index), now.queuedBytes);
      last.set(stream, now);
    });
  };
}
