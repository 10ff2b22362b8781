/**
 * The error a boot ends with when a check after planning fails (a bind, the distinct-listener proof,
 * the permission audit): every reason, one per line, for the operator.
 *
 * @module
 */

/** Boot refused after planning: a bind failed or a post-bind check did not hold. */
export class BootError extends Error {
  /** Every reason, one per line of the message. */
  readonly reasons: readonly string[];

  /**
   * Collects the reasons into one error whose message lists them, one per line.
   *
   * @param reasons why the boot was refused
   */
  constructor(reasons: readonly string[]) {
    super(reasons.join("\n"));
    this.name = "BootError";
    this.reasons = reasons;
  }
}
