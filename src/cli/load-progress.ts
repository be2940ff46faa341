import type { Gateway } from '../gateway.js';
import { elapsed, type Progress } from './progress.js';

/**
 * Feeds a progress indicator from the gateway's model states while models load (`register`,
 * `serve`): versions ready or failed out of those being loaded, and how long each one still
 * loading (and warming up) has taken so far. It only reads states; the gateway loads exactly as it would without it.
 * Returns a function that stops watching.
 */
export function watchLoading(gateway: Gateway, progress: Progress, waiting = 'validating'): () => void {
  if (!progress.enabled) return () => {};
  const since = new Map<string, number>();
  const poll = () => {
    let models: ReturnType<Gateway['listModels']>;
    try {
      models = gateway.listModels();
    } catch {
      return; // A model half-recorded: the next poll sees it whole.
    }
    const now = Date.now();
    const loading: string[] = [];
    let settled = 0;
    let failed = 0;
    for (const m of models) {
      for (const v of m.versions) {
        const key = `${m.name}@${v.version}`;
        if (v.state === 'loading') {
          if (!since.has(key)) since.set(key, now);
          loading.push(`${key} ${elapsed(now - (since.get(key) as number))}`);
        } else if (v.state === 'ready' || v.state === 'failed') {
          settled++;
          if (v.state === 'failed') failed++;
        }
      }
    }
    const total = settled + loading.length;
    const detail =
      total === 0
        ? waiting
        : [failed ? `${failed} failed` : '', loading.length ? `loading + warm-up: ${loading.join(', ')}` : '']
            .filter(Boolean)
            .join(' · ');
    progress.update({ done: settled, total, detail });
  };
  poll();
  const timer = setInterval(poll, 200);
  timer.unref();
  return () => clearInterval(timer);
}
