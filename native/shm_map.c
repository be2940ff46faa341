/*
 * tensorgate_shm: the system calls the gateway needs and Node does not expose. It maps a file
 * MAP_SHARED into an external ArrayBuffer, so the gateway can decode base64 or read .npy data
 * straight into a shared-memory arena slot instead of writing it there with positioned fs calls;
 * and it opens a file beneath a folder's descriptor with no link on the way (openat2), so that a
 * file under the allowed roots is opened and checked in one call. Plain C on node_api.h (N-API 8),
 * no dependencies; Linux only.
 *
 *   map(fd, length[, readOnly]) -> ArrayBuffer   mmap(0..length) MAP_SHARED, munmap when collected
 *   allocate(fd, length) -> undefined            posix_fallocate(0..length): back every page now
 *   openBeneath(dirFd, path, flags) -> fd        openat2(dirFd, path, flags | O_CLOEXEC) resolving
 *                                                RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS: ELOOP where
 *                                                any part of path is a link, EXDEV where it leaves
 *                                                dirFd's folder, ENOSYS where the kernel predates it
 *
 * Errors come back as JS errors with `code` set to the errno name (EBADF, ENOMEM, ENOSPC...) and
 * `syscall` to the call that failed; bad arguments as TypeError / RangeError. Nothing aborts.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <linux/openat2.h>

#ifndef SYS_openat2
#define SYS_openat2 437
#endif

#ifndef NAPI_VERSION
#define NAPI_VERSION 8
#endif
#include <node_api.h>

/* Largest length accepted: JS numbers are exact up to 2^53 - 1. */
#define MAX_SAFE 9007199254740991.0

static const char *errno_name(int err) {
  switch (err) {
    case EACCES: return "EACCES";
    case EAGAIN: return "EAGAIN";
    case EBADF: return "EBADF";
    case EFBIG: return "EFBIG";
    case EINTR: return "EINTR";
    case EINVAL: return "EINVAL";
    case EIO: return "EIO";
    case ELOOP: return "ELOOP";
    case EMFILE: return "EMFILE";
    case ENAMETOOLONG: return "ENAMETOOLONG";
    case ENOENT: return "ENOENT";
    case ENOSYS: return "ENOSYS";
    case ENOTDIR: return "ENOTDIR";
    case EXDEV: return "EXDEV";
    case ENFILE: return "ENFILE";
    case ENODEV: return "ENODEV";
    case ENOMEM: return "ENOMEM";
    case ENOSPC: return "ENOSPC";
    case EOPNOTSUPP: return "EOPNOTSUPP";
    case EOVERFLOW: return "EOVERFLOW";
    case EPERM: return "EPERM";
    case ESPIPE: return "ESPIPE";
    case ETXTBSY: return "ETXTBSY";
    default: return "EUNKNOWN";
  }
}

/* Throws Error(message) with .code = errno name, .errno = -err, .syscall = syscall. */
static void throw_errno(napi_env env, int err, const char *syscall, const char *detail) {
  char message[256];
  snprintf(message, sizeof message, "%s: %s (%s)%s%s", syscall, strerror(err), errno_name(err),
           detail ? ", " : "", detail ? detail : "");
  napi_value msg, code, error, value;
  if (napi_create_string_utf8(env, message, NAPI_AUTO_LENGTH, &msg) != napi_ok) return;
  if (napi_create_string_utf8(env, errno_name(err), NAPI_AUTO_LENGTH, &code) != napi_ok) return;
  if (napi_create_error(env, code, msg, &error) != napi_ok) return;
  if (napi_create_int32(env, -err, &value) == napi_ok) napi_set_named_property(env, error, "errno", value);
  if (napi_create_string_utf8(env, syscall, NAPI_AUTO_LENGTH, &value) == napi_ok)
    napi_set_named_property(env, error, "syscall", value);
  napi_throw(env, error);
}

/*
 * Reads up to `max` arguments into argv; answers how many were given, or 0 (having thrown) when
 * fewer than `required` were, with `usage` as the message.
 */
static size_t get_args(napi_env env, napi_callback_info info, napi_value *argv, size_t max, size_t required,
                       const char *usage) {
  size_t argc = max;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok) return 0;
  if (argc < required) {
    napi_throw_type_error(env, "ERR_MISSING_ARGS", usage);
    return 0;
  }
  return argc;
}

/* Reads argv[index] as an integer in [min, max]; throws and returns 0 otherwise. */
static int get_integer(napi_env env, napi_value value, const char *name, double min, double max, double *out) {
  napi_valuetype type;
  if (napi_typeof(env, value, &type) != napi_ok || type != napi_number) {
    char message[128];
    snprintf(message, sizeof message, "%s must be a number", name);
    napi_throw_type_error(env, "ERR_INVALID_ARG_TYPE", message);
    return 0;
  }
  double d;
  napi_get_value_double(env, value, &d);
  if (!isfinite(d) || d != floor(d) || d < min || d > max) {
    char message[160];
    snprintf(message, sizeof message, "%s must be an integer in [%.0f, %.0f], got %g", name, min, max, d);
    napi_throw_range_error(env, "ERR_OUT_OF_RANGE", message);
    return 0;
  }
  *out = d;
  return 1;
}

static void unmap(napi_env env, void *data, void *hint) {
  (void)env;
  munmap(data, (size_t)(uintptr_t)hint);
}

static napi_value map(napi_env env, napi_callback_info info) {
  napi_value argv[3];
  size_t argc = get_args(env, info, argv, 3, 2, "map(fd, length[, readOnly]) needs fd and length");
  if (argc == 0) return NULL;
  double fd_d, length_d;
  if (!get_integer(env, argv[0], "fd", 0, 2147483647.0, &fd_d)) return NULL;
  if (!get_integer(env, argv[1], "length", 1, MAX_SAFE, &length_d)) return NULL;
  bool read_only = false;
  if (argc >= 3) {
    napi_valuetype type;
    napi_typeof(env, argv[2], &type);
    if (type != napi_undefined && napi_get_value_bool(env, argv[2], &read_only) != napi_ok) {
      napi_throw_type_error(env, "ERR_INVALID_ARG_TYPE", "readOnly must be a boolean");
      return NULL;
    }
  }
  int fd = (int)fd_d;
  size_t length = (size_t)length_d;

  /* Touching a mapped page past the end of the file raises SIGBUS and kills the process, so a
   * mapping longer than the file is refused here instead. */
  struct stat st;
  if (fstat(fd, &st) != 0) {
    throw_errno(env, errno, "fstat", NULL);
    return NULL;
  }
  if (!S_ISREG(st.st_mode)) {
    throw_errno(env, ENODEV, "mmap", "not a regular file");
    return NULL;
  }
  if ((uint64_t)st.st_size < (uint64_t)length) {
    char detail[128];
    snprintf(detail, sizeof detail, "the file is %lld bytes, shorter than the %zu to map", (long long)st.st_size,
             length);
    throw_errno(env, EINVAL, "mmap", detail);
    return NULL;
  }

  int prot = read_only ? PROT_READ : PROT_READ | PROT_WRITE;
  void *addr = mmap(NULL, length, prot, MAP_SHARED, fd, 0);
  if (addr == MAP_FAILED) {
    throw_errno(env, errno, "mmap", NULL);
    return NULL;
  }
  napi_value result;
  napi_status status = napi_create_external_arraybuffer(env, addr, length, unmap, (void *)(uintptr_t)length, &result);
  if (status != napi_ok) {
    munmap(addr, length);
    bool pending = false;
    napi_is_exception_pending(env, &pending);
    if (!pending) napi_throw_error(env, "ERR_SHM_MAP", "could not wrap the mapping in an ArrayBuffer");
    return NULL;
  }
  return result;
}

static napi_value allocate(napi_env env, napi_callback_info info) {
  napi_value argv[2];
  if (get_args(env, info, argv, 2, 2, "allocate(fd, length) needs fd and length") == 0) return NULL;
  double fd_d, length_d;
  if (!get_integer(env, argv[0], "fd", 0, 2147483647.0, &fd_d)) return NULL;
  if (!get_integer(env, argv[1], "length", 1, MAX_SAFE, &length_d)) return NULL;
  int err;
  do {
    err = posix_fallocate((int)fd_d, 0, (off_t)length_d);
  } while (err == EINTR);
  if (err != 0) {
    throw_errno(env, err, "posix_fallocate", NULL);
    return NULL;
  }
  return NULL;
}

static napi_value open_beneath(napi_env env, napi_callback_info info) {
  napi_value argv[3];
  if (get_args(env, info, argv, 3, 3, "openBeneath(dirFd, path, flags) needs all three") == 0) return NULL;
  double dir_d, flags_d;
  if (!get_integer(env, argv[0], "dirFd", 0, 2147483647.0, &dir_d)) return NULL;
  if (!get_integer(env, argv[2], "flags", 0, 2147483647.0, &flags_d)) return NULL;
  char path[4096];
  size_t length;
  napi_valuetype type;
  if (napi_typeof(env, argv[1], &type) != napi_ok || type != napi_string) {
    napi_throw_type_error(env, "ERR_INVALID_ARG_TYPE", "path must be a string");
    return NULL;
  }
  if (napi_get_value_string_utf8(env, argv[1], path, sizeof path, &length) != napi_ok) return NULL;
  if (length >= sizeof path - 1) {
    throw_errno(env, ENAMETOOLONG, "openat2", NULL);
    return NULL;
  }
  /* Reading only: O_CREAT would need a mode, and a file made here is never wanted. */
  struct open_how how = {
    .flags = (uint64_t)((int)flags_d & ~(O_CREAT | O_TMPFILE)) | O_CLOEXEC,
    .mode = 0,
    .resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS,
  };
  long fd;
  do {
    fd = syscall(SYS_openat2, (int)dir_d, path, &how, sizeof how);
  } while (fd < 0 && (errno == EINTR || errno == EAGAIN));
  if (fd < 0) {
    throw_errno(env, errno, "openat2", NULL);
    return NULL;
  }
  napi_value result;
  if (napi_create_int32(env, (int32_t)fd, &result) != napi_ok) return NULL;
  return result;
}

static napi_value init(napi_env env, napi_value exports) {
  napi_property_descriptor props[] = {
    {"map", NULL, map, NULL, NULL, NULL, napi_enumerable, NULL},
    {"allocate", NULL, allocate, NULL, NULL, NULL, napi_enumerable, NULL},
    {"openBeneath", NULL, open_beneath, NULL, NULL, NULL, napi_enumerable, NULL},
  };
  napi_define_properties(env, exports, sizeof props / sizeof props[0], props);
  return exports;
}

NAPI_MODULE(NODE_GYP_MODULE_NAME, init)
