import { useCallback, useEffect, useRef, useState, type DependencyList } from 'react';
import { useApi } from '@backstage/core-plugin-api';
import { gpuplaneApiRef } from '../api/GpuplaneApi';
import type { Observer, Unsubscribe } from '../api/StatusSource';
import type { CurrentUser } from '../api/types';

export interface Loaded<T> {
  value?: T;
  error?: unknown;
  loading: boolean;
  reload: () => void;
}

/** Runs load when deps change; the newest call wins. */
export function useLoad<T>(load: () => Promise<T>, deps: DependencyList): Loaded<T> {
  const [state, setState] = useState<{ value?: T; error?: unknown; loading: boolean }>({
    loading: true,
  });
  const [generation, setGeneration] = useState(0);
  const latest = useRef(0);
  useEffect(() => {
    const call = ++latest.current;
    setState(s => ({ ...s, loading: true }));
    load().then(
      value => call === latest.current && setState({ value, loading: false }),
      error => call === latest.current && setState({ error, loading: false }),
    );
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [...deps, generation]);
  const reload = useCallback(() => setGeneration(g => g + 1), []);
  return { ...state, reload };
}

/** Subscribes to a live source while mounted and while deps stay the same. */
export function useWatch<T>(
  watch: (observer: Observer<T>) => Unsubscribe,
  deps: DependencyList,
): { value?: T; error?: unknown } {
  const [state, setState] = useState<{ value?: T; error?: unknown }>({});
  useEffect(() => {
    setState({});
    return watch({
      next: value => setState({ value }),
      error: error => setState(s => ({ value: s.value, error })),
    });
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, deps);
  return state;
}

/** value, once it has stopped changing for delayMs. */
export function useDebounced<T>(value: T, delayMs: number): T {
  const [debounced, setDebounced] = useState(value);
  useEffect(() => {
    const t = setTimeout(() => setDebounced(value), delayMs);
    return () => clearTimeout(t);
  }, [value, delayMs]);
  return debounced;
}

export function useCurrentUser(): Loaded<CurrentUser> {
  const api = useApi(gpuplaneApiRef);
  return useLoad(() => api.getCurrentUser(), [api]);
}

/** A fresh idempotency key for a create call. */
export function newRequestId(): string {
  const c = globalThis.crypto;
  if (c && typeof c.randomUUID === 'function') return c.randomUUID();
  return `${Date.now().toString(36)}-${Math.random().toString(36).slice(2, 12)}`;
}
