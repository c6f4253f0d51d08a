import type { Quota } from '../api/types';

const GI = 1024 ** 3;

/** Amounts as numbers: GPUs, CPU cores and GiB; missing fields are 0. */
export interface Amounts {
  gpu: number;
  cpu: number;
  memoryGiB: number;
}

// The API omits zero values and sends int64 as strings.
export function amounts(q: Quota | undefined): Amounts {
  return {
    gpu: Number(q?.gpu ?? 0) || 0,
    cpu: (Number(q?.cpuMillis ?? 0) || 0) / 1000,
    memoryGiB: (Number(q?.memoryBytes ?? 0) || 0) / GI,
  };
}

export function addAmounts(a: Amounts, b: Amounts): Amounts {
  return { gpu: a.gpu + b.gpu, cpu: a.cpu + b.cpu, memoryGiB: a.memoryGiB + b.memoryGiB };
}

export const zeroAmounts: Amounts = { gpu: 0, cpu: 0, memoryGiB: 0 };

const trim = (n: number) => String(Math.round(n * 100) / 100);

export const formatGpu = (n: number) => `${trim(n)} GPU`;
export const formatCpu = (n: number) => `${trim(n)} CPU`;
export const formatMemory = (gib: number) =>
  gib >= 1024 ? `${trim(gib / 1024)} TiB` : `${trim(gib)} GiB`;

/** "2 GPU · 16 CPU · 64 GiB" */
export function formatQuota(q: Quota | undefined): string {
  const a = amounts(q);
  return `${formatGpu(a.gpu)} · ${formatCpu(a.cpu)} · ${formatMemory(a.memoryGiB)}`;
}

export const gibToBytes = (gib: number) => Math.round(gib * GI);
export const coresToMillis = (cores: number) => Math.round(cores * 1000);
