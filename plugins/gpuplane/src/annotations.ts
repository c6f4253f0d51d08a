import type { Entity } from '@backstage/catalog-model';

/** The annotation that ties a catalog Group to a gpuplane team id. */
export const GPUPLANE_TEAM_ANNOTATION = 'gpuplane.io/team';

/** The gpuplane team id of an entity, if annotated. */
export function gpuplaneTeamOf(entity: Entity): string | undefined {
  return entity.metadata.annotations?.[GPUPLANE_TEAM_ANNOTATION]?.trim() || undefined;
}

/** Show the tab only on Group entities annotated with a gpuplane team. */
export function isGpuplaneTeamAvailable(entity: Entity): boolean {
  return entity.kind.toLowerCase() === 'group' && gpuplaneTeamOf(entity) !== undefined;
}
