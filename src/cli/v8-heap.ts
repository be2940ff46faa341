import { setFlagsFromString } from 'node:v8';

/**
 * Keeps external memory out of the old generation's limit, for a server whose requests carry
 * large tensors (docs/architecture.md, "Large bodies").
 *
 * By default V8 adds every byte of external memory allocated since the last full collection
 * (ArrayBuffer backing stores: each socket read, each Buffer) to the old generation's size when
 * it decides whether to start one, dead bytes included. A 600 KB OIP body arrives in about ten
 * 64 KB socket reads that die as soon as the tensor is in shared memory, but only a scavenge frees
 * them, and scavenges are rare when JavaScript itself allocates little. So the old generation
 * seems to fill with bytes no one holds, and V8 marks the whole heap (30 MB in a gateway) every
 * 20-30 such requests: 1.6-2.6 ms of the gateway's CPU per call, where the rest of the call costs
 * 1.1 (bench/large-body). V8's newer accounting (`--external-memory-accounted-in-global-limit`, V8 13 and newer)
 * gives external memory a limit of its own, grown from what is live at each collection.
 *
 * Returns whether the flag was set: not on an older V8 (it does not know the flag), nor when
 * `TENSORGATE_V8_HEAP=default` asks for V8's own behaviour.
 */
export function accountExternalMemoryApart(
  env: NodeJS.ProcessEnv = process.env,
  v8Version: string = process.versions.v8,
): boolean {
  if (env.TENSORGATE_V8_HEAP === 'default') return false;
  if (Number(v8Version.split('.')[0]) < 13) return false;
  setFlagsFromString('--external-memory-accounted-in-global-limit');
  return true;
}
