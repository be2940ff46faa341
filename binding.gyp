{
  "targets": [
    {
      "target_name": "tensorgate_shm",
      "sources": ["native/shm_map.c"],
      "cflags": ["-Wall", "-Wextra"],
      "defines": ["NAPI_VERSION=8"]
    }
  ]
}
