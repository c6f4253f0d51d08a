/**
 * Typed client of the gpuplane REST API.
 *
 * `paths`, `components` and `operations` are generated from api/openapi.yaml
 * by openapi-typescript (`make generate-ts`); the client is openapi-fetch with
 * bearer-token injection, and errors become {@link GpuplaneError}.
 *
 * @packageDocumentation
 */
import type { Readable, Writable } from 'openapi-typescript-helpers';
import type { components } from './generated/schema';

export type { paths, components, operations } from './generated/schema';

/**
 * A schema of the API as calls return it (openapi-fetch's Readable view:
 * read-only fields present, write-only ones gone), e.g.
 * `Schema<'VirtualCluster'>`.
 */
export type Schema<K extends keyof components['schemas']> = Readable<components['schemas'][K]>;

/**
 * A schema of the API as a request body (openapi-fetch's Writable view:
 * read-only fields such as name, state and etag gone, write-only ones such
 * as Quota.cpu present), e.g. `SchemaInput<'Request'>`.
 */
export type SchemaInput<K extends keyof components['schemas']> = Writable<components['schemas'][K]>;
export { createGpuplaneClient, unwrap } from './client';
export type { GpuplaneClientOptions, GpuplaneFetchClient } from './client';
export { GpuplaneError, ErrorReason, ERROR_DOMAIN, isGpuplaneError } from './errors';
export type { FieldViolation, RpcStatus, RpcCodeName } from './errors';
