/**
 * Turning a rejected worker call into words. The worker marks mistakes a person can fix with
 * name "UserError" (protocol.ts): those show their message alone. Anything else is a bug: it shows its
 * message and the details go to the console.
 */
export function describeError(e: unknown): string {
  if (e instanceof Error || (typeof e === 'object' && e !== null && 'message' in e)) {
    const err = e as { name?: string; message: string };
    if (err.name === 'UserError') return err.message;
    console.error(e);
    return `Something went wrong: ${err.message}`;
  }
  console.error(e);
  return `Something went wrong: ${String(e)}`;
}
