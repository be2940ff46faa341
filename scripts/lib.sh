# Sourced by the set-up, test and bench scripts: which Node and which Python tensorgate runs on, in
# one place. Paths are the checkout's this file is in, wherever it is sourced from: a bench run with
# the machine's older Node would start each server one process down (bin/tensorgate.js re-runs
# itself on the project's Node), and its per-process CPU figures would miss the server.
#
# Node: tensorgate needs Node >= 22.15 (current LTS lines: 22 and 24). When the machine's `node` is
# older, scripts/setup.sh installs Node $TG_NODE_VERSION from the npm registry's `node` package into
# .tensorgate/node, with its headers (native addons build against them), and every script puts it
# first on PATH; bin/tensorgate.js starts itself on it too. Once it is there it is always used, so
# the addons and the Node that loads them agree.
#
# Python: the workers, exporters, model builders and pytest run on $TENSORGATE_PYTHON when set
# (an interpreter with its own torch), else on .tensorgate/venv, which scripts/setup.sh fills from
# python/requirements.txt (a pinned torch 2.x from PyPI).

TG_NODE_VERSION=24.21.0
TG_NODE_MIN=22.15.0
TG_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TG_VENV="$TG_ROOT/.tensorgate/venv"

# The folder of the project's Node (bin/node and include/node), when it is installed.
project_node_dir() {
  local dir
  for dir in "$TG_ROOT"/.tensorgate/node/node_modules/node/node_modules/node-linux-*; do
    [[ -x $dir/bin/node ]] && { echo "$dir"; return 0; }
  done
  return 1
}

# Puts the project's Node first on PATH (and its headers where node-gyp looks), when it exists.
use_project_node() {
  local dir
  if dir=$(project_node_dir); then
    export PATH="$dir/bin:$PATH" npm_config_nodedir="$dir"
  fi
}

# Whether `node` on PATH is at least TG_NODE_MIN.
node_is_current() {
  node -e '
    const [want, have] = [process.argv[1], process.versions.node].map((v) => v.split(".").map(Number));
    const newer = have[0] - want[0] || have[1] - want[1] || have[2] - want[2];
    process.exit(newer >= 0 ? 0 : 1);
  ' "$TG_NODE_MIN" 2>/dev/null
}

# The interpreter workers run on.
runtime_python() {
  echo "${TENSORGATE_PYTHON:-$TG_VENV/bin/python}"
}

# install_venv VENV REQUIREMENTS [--over-runtime]: a virtual environment with REQUIREMENTS
# installed, rebuilt only when they changed. With --over-runtime its imports fall back to the
# runtime's packages (torch and its libraries, 5 GB) through a .pth file, so that third-party
# servers and clients that need torch (the KServe model server, the bench peers) share it.
install_venv() {
  local venv=$1 requirements=$2 over=${3:-} base=python3 stamp
  [[ $over == --over-runtime ]] && base=$(runtime_python)
  stamp="$(cat "$requirements")${over:+$'\n'# over $base}"
  if [[ -x $venv/bin/python && "$(cat "$venv/installed-requirements.txt" 2>/dev/null)" == "$stamp" ]]; then
    echo "$(basename "$venv") already installed in ${venv#"$PWD/"}"
    return
  fi
  echo "installing $requirements into ${venv#"$PWD/"}"
  rm -rf "$venv"
  "$base" -m venv "$venv"
  if [[ $over == --over-runtime ]]; then
    local site
    site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    "$base" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])' > "$site/tensorgate-runtime.pth"
  fi
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$requirements"
  printf '%s' "$stamp" > "$venv/installed-requirements.txt"
}

# side_by_side COMMAND...: runs each COMMAND (a line of bash, which may call this file's functions)
# in the background at once and prints their outputs whole, in the order given: a command's once it
# and those before it have ended. Returns 1 if any failed, naming each that did. For steps that do
# not depend on each other and mostly wait (downloads, unpacking, a test run that keeps one core
# busy), where there are cores to spare.
side_by_side() {
  local dir i rc failed=0
  local -a commands=("$@") pids=()
  dir=$(mktemp -d)
  for i in "${!commands[@]}"; do
    (eval "${commands[$i]}") >"$dir/$i.log" 2>&1 &
    pids+=($!)
  done
  for i in "${!commands[@]}"; do
    rc=0
    wait "${pids[$i]}" || rc=$?
    cat "$dir/$i.log"
    if ((rc)); then
      echo "failed with exit status $rc: ${commands[$i]}" >&2
      failed=1
    fi
  done
  rm -rf "$dir"
  return "$failed"
}
