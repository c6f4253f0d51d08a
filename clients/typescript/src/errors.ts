/**
 * Errors of the gpuplane API as a typed exception.
 *
 * Every error the API returns is a google.rpc.Status: a gRPC code, a message,
 * an ErrorInfo (domain "gpuplane.dev", a stable machine-readable reason such
 * as QUOTA_EXCEEDED) and, for bad input, a BadRequest with field violations.
 * GpuplaneError carries all of it so callers branch on `reason` and show
 * violations next to the form fields they belong to.
 */

/** The error domain of every ErrorInfo gpuplane returns. */
export const ERROR_DOMAIN = 'gpuplane.dev';

const ERROR_INFO_TYPE = 'type.googleapis.com/google.rpc.ErrorInfo';
const BAD_REQUEST_TYPE = 'type.googleapis.com/google.rpc.BadRequest';

/**
 * Stable ErrorInfo reasons of the gpuplane API (internal/errs in the server).
 * Unknown reasons may appear in newer servers; compare against these, do not
 * assume the list is closed.
 */
export const ErrorReason = {
  InvalidField: 'INVALID_FIELD',
  NotFound: 'NOT_FOUND',
  AlreadyExists: 'ALREADY_EXISTS',
  EtagMismatch: 'ETAG_MISMATCH',
  PermissionDenied: 'PERMISSION_DENIED',
  Unauthenticated: 'UNAUTHENTICATED',
  QuotaExceeded: 'QUOTA_EXCEEDED',
  BelowAllocation: 'BELOW_ALLOCATION',
  InvalidStateTransition: 'INVALID_STATE_TRANSITION',
  HasDependents: 'HAS_DEPENDENTS',
  RequestIdReused: 'REQUEST_ID_REUSED',
  InvalidPageToken: 'INVALID_PAGE_TOKEN',
  InvalidFilter: 'INVALID_FILTER',
  IsolationTierViolation: 'ISOLATION_TIER_VIOLATION',
  InvalidPolicy: 'INVALID_POLICY',
  SchemaBehind: 'SCHEMA_BEHIND',
  Internal: 'INTERNAL',
  /** Client side: the server could not be reached (network, CORS, TLS). */
  Unreachable: 'UNREACHABLE',
} as const;

/** google.rpc.Code names by number. */
const CODE_NAMES = [
  'OK',
  'CANCELLED',
  'UNKNOWN',
  'INVALID_ARGUMENT',
  'DEADLINE_EXCEEDED',
  'NOT_FOUND',
  'ALREADY_EXISTS',
  'PERMISSION_DENIED',
  'RESOURCE_EXHAUSTED',
  'FAILED_PRECONDITION',
  'ABORTED',
  'OUT_OF_RANGE',
  'UNIMPLEMENTED',
  'INTERNAL',
  'UNAVAILABLE',
  'DATA_LOSS',
  'UNAUTHENTICATED',
] as const;

/** The gRPC code name of a google.rpc.Code number ("NOT_FOUND"). */
export type RpcCodeName = (typeof CODE_NAMES)[number];

/** google.rpc.Status as the REST gateway sends it. */
export interface RpcStatus {
  code?: number;
  message?: string;
  details?: Array<{ '@type'?: string; [key: string]: unknown }>;
}

/** One BadRequest.FieldViolation: which request field, and what is wrong. */
export interface FieldViolation {
  /** Path of the field, e.g. "request.create_virtual_cluster.spec.quota.gpu". */
  field: string;
  description: string;
}

// HTTP status -> gRPC code, for answers that carry no Status body (a proxy's
// 502 page, an HTML error from an ingress).
const HTTP_TO_CODE: Record<number, number> = {
  400: 3,
  401: 16,
  403: 7,
  404: 5,
  409: 10,
  412: 9,
  429: 8,
  499: 1,
  501: 12,
  503: 14,
  504: 4,
};

/** An error answered by (or on the way to) the gpuplane API. */
export class GpuplaneError extends Error {
  override readonly name = 'GpuplaneError';
  /** HTTP status of the answer; 0 when the server was not reached. */
  readonly httpStatus: number;
  /** google.rpc.Code number (5 = NOT_FOUND, ...). */
  readonly code: number;
  /** ErrorInfo.reason, e.g. "QUOTA_EXCEEDED"; undefined when the answer had none. */
  readonly reason?: string;
  /** ErrorInfo.domain; "gpuplane.dev" for errors from gpuplane itself. */
  readonly domain?: string;
  /** ErrorInfo.metadata, e.g. {resource: "teams/team-a"}. */
  readonly metadata: Readonly<Record<string, string>>;
  /** BadRequest field violations (empty unless the input was invalid). */
  readonly fieldViolations: readonly FieldViolation[];
  /** The server's x-request-id of the call, which its logs are keyed by. */
  readonly requestId?: string;
  /** The Status body as received. */
  readonly status: RpcStatus;

  constructor(init: {
    httpStatus: number;
    status: RpcStatus;
    requestId?: string;
    cause?: unknown;
  }) {
    const message = init.status.message || `HTTP ${init.httpStatus}`;
    super(message, init.cause === undefined ? undefined : { cause: init.cause });
    this.httpStatus = init.httpStatus;
    this.status = init.status;
    this.code = init.status.code ?? HTTP_TO_CODE[init.httpStatus] ?? 2;
    this.requestId = init.requestId;
    let metadata: Record<string, string> = {};
    const violations: FieldViolation[] = [];
    for (const d of init.status.details ?? []) {
      if (d['@type'] === ERROR_INFO_TYPE) {
        this.reason = typeof d.reason === 'string' ? d.reason : undefined;
        this.domain = typeof d.domain === 'string' ? d.domain : undefined;
        metadata = { ...(d.metadata as Record<string, string> | undefined) };
      } else if (d['@type'] === BAD_REQUEST_TYPE) {
        const list = (d.fieldViolations ?? d.field_violations) as
          | Array<Partial<FieldViolation>>
          | undefined;
        for (const v of list ?? []) {
          violations.push({ field: v.field ?? '', description: v.description ?? '' });
        }
      }
    }
    this.metadata = metadata;
    this.fieldViolations = violations;
  }

  /** The gRPC code name, e.g. "FAILED_PRECONDITION". */
  get codeName(): RpcCodeName | 'UNKNOWN' {
    return CODE_NAMES[this.code] ?? 'UNKNOWN';
  }

  /** Builds the error from an HTTP answer and its (possibly non-JSON) body. */
  static fromResponse(response: Response, body: unknown): GpuplaneError {
    const requestId = response.headers.get('x-request-id') ?? undefined;
    if (isRpcStatus(body)) {
      return new GpuplaneError({ httpStatus: response.status, status: body, requestId });
    }
    const text = typeof body === 'string' ? body.trim().slice(0, 200) : '';
    const statusText = response.statusText ? ` ${response.statusText}` : '';
    return new GpuplaneError({
      httpStatus: response.status,
      status: {
        message: `HTTP ${response.status}${statusText}${text ? `: ${text}` : ''}`,
      },
      requestId,
    });
  }

  /** For a fetch that never got an answer (network down, CORS refused, TLS). */
  static unreachable(baseUrl: string, cause: unknown): GpuplaneError {
    const why = cause instanceof Error ? cause.message : String(cause);
    return new GpuplaneError({
      httpStatus: 0,
      status: {
        code: 14,
        message: `cannot reach gpuplane at ${baseUrl} (${why}); is it running, and does its --cors-allowed-origins list this page's origin?`,
        details: [{ '@type': ERROR_INFO_TYPE, reason: ErrorReason.Unreachable, domain: ERROR_DOMAIN }],
      },
      cause,
    });
  }
}

function isRpcStatus(body: unknown): body is RpcStatus {
  if (typeof body !== 'object' || body === null || Array.isArray(body)) {
    return false;
  }
  const b = body as Record<string, unknown>;
  return (
    (typeof b.message === 'string' || typeof b.code === 'number') &&
    (b.details === undefined || Array.isArray(b.details))
  );
}

/** True for a GpuplaneError, also one from another copy of this package. */
export function isGpuplaneError(e: unknown): e is GpuplaneError {
  return (
    e instanceof GpuplaneError ||
    (typeof e === 'object' && e !== null && (e as { name?: unknown }).name === 'GpuplaneError')
  );
}
