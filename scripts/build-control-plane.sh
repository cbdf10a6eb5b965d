#!/usr/bin/env bash
# Builds the test control plane (issue 6) from Go modules into a cache folder outside the repo:
#   ${CUDANALYST_CACHE:-$HOME/.cache/cudanalyst}/control-plane/<k8s-version>/bin/
#     etcd kube-apiserver kube-controller-manager kube-scheduler kubectl kwok helm kueue
# and, as the piece kueue-manifests, Kueue's CRDs, webhook configurations and RBAC copied out of its module:
#   .../control-plane/<k8s-version>/kueue-config/{crd,webhook,rbac}/
# Versions are pinned in scripts/control-plane/versions.env. Each binary has a stamp naming what it
# was built from; a binary whose stamp matches is kept, so a second run builds nothing.
#
# Usage: scripts/build-control-plane.sh            build what is missing
#        scripts/build-control-plane.sh --bin-dir  print the bin folder and exit
#        scripts/build-control-plane.sh --check    exit 0 when everything is built, 1 otherwise
# Exit status: 0 on success; 1 when a piece fails to build (its name, module and log are printed);
# 2 on bad usage or a missing Go toolchain.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
src_dir="$here/control-plane"

# versions.env holds plain KEY=VALUE lines; read them without evaluating anything. Another file
# can be named by CUDANALYST_CONTROL_PLANE_VERSIONS (the script's own tests use that).
versions_file="${CUDANALYST_CONTROL_PLANE_VERSIONS:-$src_dir/versions.env}"
[[ -r "$versions_file" ]] || { echo "error: cannot read versions file $versions_file" >&2; exit 2; }
while IFS='=' read -r key value; do
  case "$key" in ''|'#'*) continue ;; esac
  declare "$key=$value"
done < "$versions_file"
for key in K8S_VERSION K8S_STAGING_VERSION ETCD_VERSION KWOK_VERSION HELM_VERSION KUEUE_VERSION; do
  [[ -n "${!key:-}" ]] || { echo "error: $versions_file does not set $key" >&2; exit 2; }
done

cache_root="${CUDANALYST_CACHE:-$HOME/.cache/cudanalyst}/control-plane/$K8S_VERSION"
bin_dir="$cache_root/bin"
stamp_dir="$cache_root/stamps"
work_dir="$cache_root/src"
log_dir="$cache_root/logs"
kueue_config="$cache_root/kueue-config"

pieces=(etcd kube-apiserver kube-controller-manager kube-scheduler kubectl kwok helm kueue kueue-manifests)

# What each binary is built from; the stamp is this string plus the Go version.
origin() {
  case "$1" in
    etcd) echo "go.etcd.io/etcd/server/v3@$ETCD_VERSION" ;;
    kube-apiserver|kube-controller-manager|kube-scheduler|kubectl)
      echo "k8s.io/kubernetes/cmd/$1@$K8S_VERSION staging@$K8S_STAGING_VERSION" ;;
    kwok) echo "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION" ;;
    helm) echo "helm.sh/helm/v3/cmd/helm@$HELM_VERSION" ;;
    kueue) echo "sigs.k8s.io/kueue/cmd/kueue@$KUEUE_VERSION" ;;
    # What is copied is part of the stamp: a change of the list below copies again.
    kueue-manifests) echo "sigs.k8s.io/kueue/config@$KUEUE_VERSION crd+patches webhook+kustomization rbac" ;;
  esac
}

stamp_of() {
  if [[ "$1" == kueue-manifests ]]; then origin "$1"; return; fi   # copied files: no Go version in it
  echo "$(origin "$1") $(go env GOVERSION) trimpath stripped"
}

# Where a piece ends up: a binary, or for kueue-manifests a folder.
output_of() { if [[ "$1" == kueue-manifests ]]; then echo "$kueue_config"; else echo "$bin_dir/$1"; fi; }

is_built() {
  local out
  out="$(output_of "$1")"
  { [[ -x "$out" && -f "$out" ]] || [[ -d "$out" && "$1" == kueue-manifests ]]; } \
    && [[ -f "$stamp_dir/$1" ]] && [[ "$(cat "$stamp_dir/$1")" == "$(stamp_of "$1")" ]]
}

case "${1:-}" in
  --bin-dir) echo "$bin_dir"; exit 0 ;;
  --check|"") ;;
  *) echo "usage: $0 [--bin-dir|--check]" >&2; exit 2 ;;
esac

if ! command -v go >/dev/null 2>&1; then
  echo "error: the Go toolchain (go) is not on PATH; install Go >= 1.26 first" >&2
  exit 2
fi

if [[ "${1:-}" == "--check" ]]; then
  missing=0
  for p in "${pieces[@]}"; do
    if is_built "$p"; then echo "built:   $p"; else echo "missing: $p"; missing=1; fi
  done
  exit "$missing"
fi

mkdir -p "$bin_dir" "$stamp_dir" "$work_dir" "$log_dir"

# One build at a time per cache folder: CI and a developer may run this script together.
exec 9>"$cache_root/.lock"
if ! flock -n 9; then
  echo "another build holds $cache_root/.lock; waiting for it"
  flock 9
fi

export GOFLAGS=-mod=mod
export GOMAXPROCS="${GOMAXPROCS:-$(nproc)}"
export CGO_ENABLED=0   # static binaries: nothing from the host's C library is needed at run time
# -dwarf=false: the linker drops debug info anyway (-s -w), so the compiler need not write it (less CPU and
# smaller objects to link; the code is the same, hence no new stamp). Measured in docs/testing-cluster.md.
build_flags=(-trimpath -p "$GOMAXPROCS" -gcflags=all=-dwarf=false)
base_ldflags="-s -w"
kube_pieces=(kube-apiserver kube-controller-manager kube-scheduler kubectl)

# Wrapper module for k8s.io/kubernetes: it requires the release and replaces every k8s.io/* staging
# module (which the release points at ./staging/...) with the matching published version. The list
# is taken from the release's own go.mod so that a version bump needs no edit here.
prepare_kubernetes_module() {
  local mod="$work_dir/kubernetes"
  [[ -f "$mod/.ready-$K8S_VERSION" ]] && return 0
  rm -rf "$mod" && mkdir -p "$mod"
  local upstream
  upstream="$(cd "$mod" && go mod download -json "k8s.io/kubernetes@$K8S_VERSION" \
    | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p')"
  [[ -f "$upstream" ]] || { echo "cannot download k8s.io/kubernetes@$K8S_VERSION" >&2; return 1; }
  local go_line
  go_line="$(grep -m1 '^go ' "$upstream")"
  {
    echo "module cudanalyst.dev/control-plane/kubernetes"
    echo
    echo "$go_line"
    echo
    echo "require k8s.io/kubernetes $K8S_VERSION"
    echo
    echo "replace ("
    grep -E '^[[:space:]]+k8s\.io/[^ ]+ => \./staging/' "$upstream" \
      | awk -v v="$K8S_STAGING_VERSION" '{print "\t" $1 " => " $1 " " v}'
    echo ")"
  } > "$mod/go.mod"
  # A package of our own so that `go mod tidy` keeps the commands' dependencies in go.sum.
  cat > "$mod/tools.go" <<'EOF'
//go:build tools

package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
)
EOF
  (cd "$mod" && go mod tidy) && touch "$mod/.ready-$K8S_VERSION"
}

prepare_etcd_module() {
  local mod="$work_dir/etcd"
  [[ -f "$mod/.ready-$ETCD_VERSION" ]] && return 0
  rm -rf "$mod" && mkdir -p "$mod"
  cp "$src_dir/etcd/main.go" "$mod/main.go"
  (cd "$mod" && go mod init cudanalyst.dev/control-plane/etcd \
    && go get "go.etcd.io/etcd/server/v3@$ETCD_VERSION" && go mod tidy) \
    && touch "$mod/.ready-$ETCD_VERSION"
}

# The test fixtures install Kueue from its own manifests: the CRDs, the webhook configurations and the
# manager's RBAC role, copied out of the module (the module cache may be cleaned; the binary stays).
copy_kueue_config() {
  local dir
  dir="$(go mod download -json "sigs.k8s.io/kueue@$KUEUE_VERSION" \
    | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
  [[ -d "$dir/config/components/crd/bases" ]] || { echo "no config/components in sigs.k8s.io/kueue@$KUEUE_VERSION" >&2; return 1; }
  # Into a temporary folder first, so an interrupted copy leaves no half-filled one behind.
  local tmp="$kueue_config.tmp"
  rm -rf "$tmp" && mkdir -p "$tmp/crd/patches" "$tmp/webhook" "$tmp/rbac"
  cp "$dir"/config/components/crd/bases/*.yaml "$dir/config/components/crd/kustomization.yaml" "$tmp/crd/" \
    || return 1
  cp "$dir"/config/components/crd/patches/*.yaml "$tmp/crd/patches/" || return 1
  cp "$dir"/config/components/webhook/{manifests,kustomization}.yaml "$tmp/webhook/" || return 1
  cp "$dir"/config/components/rbac/*.yaml "$tmp/rbac/" || return 1
  chmod -R u+w "$tmp"   # the module cache is read-only
  rm -rf "$kueue_config" && mv "$tmp" "$kueue_config"
}

k8s_ldflags() {
  local major minor
  major="${K8S_VERSION#v}"; major="${major%%.*}"
  minor="${K8S_VERSION#v*.}"; minor="${minor%%.*}"
  local pkg=k8s.io/component-base/version
  echo "$base_ldflags -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor" \
       "-X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
}

# A module folder is prepared by one lane at a time: the download lane may be at it when the build lane comes.
locked() { local name="$1"; shift; ( flock 8 && "$@" ) 8>"$work_dir/.$name.lock"; }

# The module a `go install`ed piece comes from, unpacked in the module cache (downloads it).
module_dir() {
  local mod
  case "$1" in
    kwok) mod="sigs.k8s.io/kwok@$KWOK_VERSION" ;;
    helm) mod="helm.sh/helm/v3@$HELM_VERSION" ;;
    kueue) mod="sigs.k8s.io/kueue@$KUEUE_VERSION" ;;
  esac
  go mod download -json "$mod" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p'
}

# Runs beside the build lane: fetches the modules that the pieces still to build need (network and disk) while
# the build lane compiles (CPU). Best effort: what fails here, the build lane does again and reports.
download_lane() {
  local p dir
  for p in "$@"; do
    echo "$(date +%T) downloading for $p"
    case "$p" in
      etcd) locked etcd prepare_etcd_module ;;
      kube-*|kubectl) locked kubernetes prepare_kubernetes_module ;;
      kwok|helm|kueue)
        # `go list -deps` in the module itself loads exactly what `go install` will build, fetching its modules.
        dir="$(module_dir "$p")" && [[ -d "$dir" ]] \
          && (cd "$dir" && GOFLAGS=-mod=readonly go list -deps "./cmd/$p" >/dev/null) ;;
      *) true ;;
    esac || echo "downloading for $p failed; its build will try again"
  done
  echo "$(date +%T) downloads done"
}

# The kube pieces not yet built, in one `go build`: they share most of their packages, and one invocation keeps
# both cores compiling while a binary links. Into a temporary folder, then moved into place by the caller.
build_kube_group() {
  local out="$bin_dir/.kube.d" p pkgs=()
  rm -rf "$out" && mkdir -p "$out"
  for p in "$@"; do pkgs+=("k8s.io/kubernetes/cmd/$p"); done
  # Every step ends in `|| return 1`: this runs under `if`, where bash ignores `set -e`.
  locked kubernetes prepare_kubernetes_module || return 1
  (cd "$work_dir/kubernetes" && go build "${build_flags[@]}" -ldflags="$(k8s_ldflags)" -o "$out/" "${pkgs[@]}") \
    || return 1
  for p in "$@"; do
    "$out/$p" --help >/dev/null 2>&1 || "$out/$p" version >/dev/null 2>&1 \
      || { echo "built $p does not run" >&2; return 1; }
  done
}

# Builds one piece (not a kube one) into a temporary file, then moves it into place, so an interrupted build
# leaves no half-written binary behind.
build_piece() {
  local p="$1" out="$bin_dir/.$1.tmp"
  rm -f "$out"
  # Every step ends in `|| return 1`: this runs under `if`, where bash ignores `set -e`.
  case "$p" in
    etcd)
      locked etcd prepare_etcd_module || return 1
      (cd "$work_dir/etcd" && go build "${build_flags[@]}" -ldflags="$base_ldflags" -o "$out" .) \
        || return 1 ;;
    kwok)
      GOBIN="$bin_dir/.kwok.d" go install "${build_flags[@]}" \
        -ldflags="$base_ldflags -X sigs.k8s.io/kwok/pkg/consts.Version=${KWOK_VERSION#v}" \
        "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION" || return 1
      mv "$bin_dir/.kwok.d/kwok" "$out" || return 1 ;;
    helm)
      GOBIN="$bin_dir/.helm.d" go install "${build_flags[@]}" \
        -ldflags="$base_ldflags -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION" \
        "helm.sh/helm/v3/cmd/helm@$HELM_VERSION" || return 1
      mv "$bin_dir/.helm.d/helm" "$out" || return 1 ;;
    kueue)
      # Kueue's go.mod has no replace directives, so its command installs as is.
      GOBIN="$bin_dir/.kueue.d" go install "${build_flags[@]}" \
        -ldflags="$base_ldflags -X sigs.k8s.io/kueue/pkg/version.GitVersion=$KUEUE_VERSION" \
        "sigs.k8s.io/kueue/cmd/kueue@$KUEUE_VERSION" || return 1
      mv "$bin_dir/.kueue.d/kueue" "$out" || return 1 ;;
    kueue-manifests)
      copy_kueue_config || return 1
      stamp_of "$p" > "$stamp_dir/$p"
      return 0 ;;
  esac
  "$out" --help >/dev/null 2>&1 || "$out" version >/dev/null 2>&1 \
    || { echo "built $p does not run" >&2; return 1; }
  mv "$out" "$bin_dir/$p" && stamp_of "$p" > "$stamp_dir/$p"
}

is_kube() { [[ " ${kube_pieces[*]} " == *" $1 "* ]]; }

echo "control plane cache: $bin_dir"
todo=() kube_todo=()
for p in "${pieces[@]}"; do
  if is_built "$p"; then
    echo "cached:   $p ($(origin "$p"))"
  else
    todo+=("$p")
    if is_kube "$p"; then kube_todo+=("$p"); fi
  fi
done
if [[ ${#todo[@]} == 0 ]]; then echo "done: nothing to build"; exit 0; fi

# The download lane gets its own process group (job control on while it starts), so that a failed or
# interrupted build ends it and the go commands under it.
dl_pid=""
stop_downloads() {
  if [[ -n "$dl_pid" ]]; then kill -TERM -- "-$dl_pid" 2>/dev/null || true; wait "$dl_pid" 2>/dev/null || true; fi
  dl_pid=""
}
trap stop_downloads EXIT
if [[ ${#todo[@]} -gt 1 ]]; then
  set -m
  download_lane "${todo[@]:1}" >"$log_dir/downloads.log" 2>&1 &
  dl_pid=$!
  set +m
fi

fail() {  # piece(s), origin, log
  echo "error: failed to build $1 from $2; the end of $3:" >&2
  tail -n 30 "$3" >&2
  rm -rf "$bin_dir"/.*.tmp "$bin_dir"/.*.d
  exit 1
}

for p in "${todo[@]}"; do
  is_built "$p" && continue   # a kube piece built with its group
  started=$SECONDS
  if is_kube "$p"; then
    log="$log_dir/kubernetes.log"
    what="k8s.io/kubernetes@$K8S_VERSION staging@$K8S_STAGING_VERSION"
    echo "building: ${kube_todo[*]} (in one go build, $what) ..."
    build_kube_group "${kube_todo[@]}" >"$log" 2>&1 || fail "${kube_todo[*]}" "$what" "$log"
    for k in "${kube_todo[@]}"; do
      mv "$bin_dir/.kube.d/$k" "$bin_dir/$k" && stamp_of "$k" > "$stamp_dir/$k"
    done
    rm -rf "$bin_dir/.kube.d"
    echo "built:    ${kube_todo[*]} in $((SECONDS - started)) s," \
         "$(cd "$bin_dir" && du -ch "${kube_todo[@]}" | tail -n1 | cut -f1)"
    continue
  fi
  echo "building: $p ($(origin "$p")) ..."
  log="$log_dir/$p.log"
  build_piece "$p" >"$log" 2>&1 || fail "$p" "$(origin "$p")" "$log"
  rm -rf "$bin_dir/.$p.d"
  echo "built:    $p in $((SECONDS - started)) s, $(du -sh "$(output_of "$p")" | cut -f1)"
done
stop_downloads
echo "done: all pieces built"
