import { renderInTestApp } from '@backstage/frontend-test-utils';
import { gpuplaneApiRef } from '../api/GpuplaneApi';
import { gpuplaneStatusApiRef } from '../api/StatusSource';
import { FakeGpuplaneApi, OnceStatusSource } from './fakes';

/** Renders element in Backstage's test app with the fake API behind the plugin's API refs. */
export function renderWithApi(element: JSX.Element, api: FakeGpuplaneApi, initialRouteEntries?: string[]) {
  return renderInTestApp(element, {
    apis: [
      [gpuplaneApiRef, api],
      [gpuplaneStatusApiRef, new OnceStatusSource(api)],
    ],
    initialRouteEntries,
  });
}
