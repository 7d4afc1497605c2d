/**
 * Typed errors of @keepquant/hub. Each carries a stable `code`, the repository (`owner/name`) or file it is
 * about as `field`, and a `Symbol.for` marker so `isInstance` works across duplicate copies of the package (a
 * bundled CLI and an installed library). Messages say what to do; none ever contains the token.
 */
const HUB_ERROR_MARKER = Symbol.for("@keepquant/hub.error");

export type HubErrorCode =
  /** An `hf:` reference that does not parse. */
  | "HUB_BAD_REFERENCE"
  /** 401: no token, or a token the Hub does not accept (also a private or unknown repository without one). */
  | "HUB_UNAUTHORIZED"
  /** 403: a gated repository whose terms this token has not accepted, or a token without read access. */
  | "HUB_FORBIDDEN"
  /** 404: no such repository, revision or file. */
  | "HUB_NOT_FOUND"
  /** The quant tag or file name matches no model file of the repository. */
  | "HUB_NO_MATCHING_FILE"
  /** The quant tag matches more than one model of the repository. */
  | "HUB_AMBIGUOUS_FILE"
  /** HF_HUB_OFFLINE=1 and the cache does not hold what the reference names. */
  | "HUB_OFFLINE_NOT_CACHED"
  /** The downloaded bytes do not hash to the Hub's sha256 (LFS oid) or git blob id. */
  | "HUB_CHECKSUM_MISMATCH"
  /** Not enough free disk space for what is left to download. */
  | "HUB_DISK_FULL"
  /** Any other HTTP failure, after the retries. */
  | "HUB_HTTP"
  /** The Hub answered something this client cannot use (a missing header, a body of the wrong shape). */
  | "HUB_BAD_RESPONSE"
  /** The download was aborted (the partial file stays for a resume). */
  | "HUB_ABORTED"
  /** A cached model named for removal is not in the cache. */
  | "HUB_NOT_CACHED"
  /** A configuration variable with a value this client cannot use. */
  | "HUB_BAD_CONFIG";

export interface HubErrorDetails {
  /** The repository (`owner/name`), file or variable the error is about. */
  field?: string;
  /** The HTTP status, for errors that come from one. */
  status?: number;
  cause?: unknown;
}

export class HubError extends Error {
  readonly [HUB_ERROR_MARKER] = true;
  readonly code: HubErrorCode;
  readonly field: string | undefined;
  readonly status: number | undefined;

  constructor(code: HubErrorCode, message: string, details: HubErrorDetails = {}) {
    super(message, details.cause === undefined ? undefined : { cause: details.cause });
    this.name = "HubError";
    this.code = code;
    this.field = details.field;
    this.status = details.status;
  }

  /** Works across duplicate copies of this package (a bundled CLI and an installed library). */
  static isInstance(value: unknown): value is HubError {
    return typeof value === "object" && value !== null && (value as Record<symbol, unknown>)[HUB_ERROR_MARKER] === true;
  }
}
