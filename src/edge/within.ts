/**
 * A time bound on a wait whose lateness is an outcome to handle, not an error: worker 0 waits at
 * most so long for the other workers to arm, to build a generation, or to stop, and then says which
 * of them were late or moves on. `@std/async`'s `deadline` rejects instead, which would make every
 * caller tell a timeout from a real failure in a catch; here lateness is a value, {@link LATE}.
 *
 * @module
 */

/** What {@link within} resolves with when the time ran out first. */
export const LATE: unique symbol = Symbol("late");

/**
 * Resolves with `promise`'s value, or {@link LATE} when `ms` pass first; the timer is cleared
 * either way, so a settled wait leaves nothing behind.
 */
export async function within<T>(promise: Promise<T>, ms: number): Promise<T | typeof LATE> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const late = new Promise<typeof LATE>((resolve) => timer = setTimeout(() => resolve(LATE), ms));
  try {
    return await Promise.race([promise, late]);
  } finally {
    clearTimeout(timer);
  }
}
