import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

/**
 * tensorgate's optional native addon (native/shm_map.c, built by node-gyp into
 * build/Release/tensorgate_shm.node): the system calls the gateway needs and Node does not expose.
 * Every caller has a fallback in plain Node for when it is not built or does not load.
 */

export interface NativeAddon {
  /** mmap(2) of bytes [0, length) of `fd`, MAP_SHARED (engines/torch/shm-map.ts). */
  map(fd: number, length: number, readOnly?: boolean): ArrayBuffer;
  /** posix_fallocate(3) of bytes [0, length) of `fd`. */
  allocate(fd: number, length: number): void;
  /**
   * openat2(2) of `path` beneath the folder `dirFd` with no link on the way
   * (security/confined-files.ts); throws with `code` ELOOP, EXDEV, ENOENT, ENOSYS...
   */
  openBeneath(dirFd: number, path: string, flags: number): number;
}

// The package root is one level up from src/ and from dist/ alike.
export const NATIVE_ADDON_PATH = resolve(
  dirname(fileURLToPath(import.meta.url)),
  '../build/Release/tensorgate_shm.node',
);

let addon: NativeAddon | null | undefined;
let loadError: string | undefined;

/** The addon, loaded at first use; null when it is not built or does not load (nativeAddonError says why). */
export function nativeAddon(): NativeAddon | null {
  if (addon !== undefined) return addon;
  addon = null;
  if (!existsSync(NATIVE_ADDON_PATH)) {
    loadError = `${NATIVE_ADDON_PATH} is not built (run npm run build:native)`;
  } else {
    try {
      addon = createRequire(import.meta.url)(NATIVE_ADDON_PATH) as NativeAddon;
    } catch (err) {
      loadError = `could not load ${NATIVE_ADDON_PATH}: ${(err as Error).message}`;
    }
  }
  return addon;
}

/** Why nativeAddon() is null; undefined when it loaded. */
export function nativeAddonError(): string | undefined {
  return nativeAddon() === null ? loadError : undefined;
}
