/**
 * An error meant for a person: it names what is wrong and what would be right.
 * The UI and CLI print `message` alone (never a stack trace) for a UserError.
 */
export class UserError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'UserError';
  }
}

export function isUserError(e: unknown): e is UserError {
  return e instanceof Error && e.name === 'UserError';
}
