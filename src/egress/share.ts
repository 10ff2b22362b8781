/**
 * Request workers share what their egress learns: every worker sends its instance and backend
 * outcomes to the others in batches (every 100 ms by default) over a `BroadcastChannel`, so a
 * breaker opens and a backend goes cold in every worker on the evidence of all of them.
 *
 * @module
 */
import type { Egress, OutcomeBatch } from "./egress.ts";

/**
 * Shares `egress`'s outcomes on the channel `name`.
 *
 * @returns a function that stops sharing
 */
export function shareEgress(egress: Egress, name: string, intervalMs = 100): () => void {
  const channel = new BroadcastChannel(name);
  egress.shareOutcomes();
  channel.onmessage = (event: MessageEvent<OutcomeBatch>) => egress.applyOutcomes(event.data);
  const timer = setInterval(() => {
    const batch = egress.takeOutcomes();
    if (batch) channel.postMessage(batch);
  }, intervalMs);
  Deno.unrefTimer(timer);
  return () => {
    clearInterval(timer);
    channel.close();
  };
}
