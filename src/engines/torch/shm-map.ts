import { nativeAddon, nativeAddonError } from '../../native.js';

/**
 * Optional native mmap for the shared-memory arenas (native/shm_map.c, built by node-gyp into
 * build/Release/tensorgate_shm.node; src/native.ts loads it). With it the gateway decodes base64 or reads .npy data
 * straight into an arena slot; without it (not built, or TENSORGATE_NO_MMAP=1) callers fall back
 * to positioned fs writes, which cost one more copy.
 */

function disabled(): boolean {
  return process.env.TENSORGATE_NO_MMAP === '1';
}

/** True when mapFile maps: the addon is built and loads, and TENSORGATE_NO_MMAP=1 is not set. */
export function shmMapAvailable(): boolean {
  return !disabled() && nativeAddon() !== null;
}

/** Why shmMapAvailable() is false (for logs and benchmarks); undefined when it is true. */
export function shmMapUnavailableReason(): string | undefined {
  if (disabled()) return 'TENSORGATE_NO_MMAP=1';
  return nativeAddonError();
}

/**
 * Maps bytes [0, length) of the open file `fd` MAP_SHARED, read-write, and returns a Buffer over
 * the mapping; undefined when mapping is unavailable (see shmMapAvailable), so that the caller
 * falls back to fs calls. The mapping lives as long as the Buffer (or any view of its
 * ArrayBuffer) and is unmapped when the GC collects it; closing or unlinking the file does not
 * invalidate it. Throws, with `code` set to the errno name, when the file is shorter than
 * `length` (touching pages past the end would raise SIGBUS), when length is 0, or when mmap fails.
 */
export function mapFile(fd: number, length: number): Buffer | undefined {
  if (disabled()) return undefined;
  const native = nativeAddon();
  if (!native) return undefined;
  return Buffer.from(native.map(fd, length));
}

/**
 * Backs bytes [0, length) of `fd` with real pages now (posix_fallocate), extending the file if it
 * is shorter. On tmpfs a mapped write to a hole that finds /dev/shm full raises SIGBUS; after this
 * call it cannot, and a full /dev/shm is an ENOSPC error thrown here instead. Returns false when
 * the addon is unavailable (nothing done).
 */
export function preallocateFile(fd: number, length: number): boolean {
  if (disabled()) return false;
  const native = nativeAddon();
  if (!native) return false;
  native.allocate(fd, length);
  return true;
}
