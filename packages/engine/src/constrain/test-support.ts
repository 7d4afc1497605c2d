/** Test support of the constraint modules (not exported from the package). */
import { ConstraintError } from "./errors.js";

/** The ConstraintError `work` throws (another error is thrown on; none is a test failure). */
export function caught(work: () => unknown): ConstraintError {
  try {
    work();
  } catch (error) {
    if (ConstraintError.isInstance(error)) return error;
    throw error;
  }
  throw new Error("expected a ConstraintError");
}
