#!/usr/bin/env bash
# Builds every binary a kind node needs from the Go module proxy (no release downloads):
# kind itself, the seven Kubernetes commands, etcd, CoreDNS, crictl and pause.
# Usage: build-binaries.sh OUT_DIR   (sourced versions from versions.env beside this script)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=versions.env
. "$here/versions.env"
out="${1:?usage: build-binaries.sh OUT_DIR}"
mkdir -p "$out/bin" "$out/work"
export CGO_ENABLED=0 GOTOOLCHAIN="$GO_TOOLCHAIN" GOFLAGS=-mod=mod
# its own GOPATH: build-images.sh reads kind's base files from this module cache
export GOPATH="$out/gopath" GOCACHE="${GOCACHE:-$out/gocache}"

say() { printf '[binaries] %s\n' "$*" >&2; }

build_in_module() {  # name, module path, version, packages...
  local name="$1" module="$2" version="$3"; shift 3
  local dir="$out/work/$name"
  mkdir -p "$dir"
  (cd "$dir"
   [ -f go.mod ] || { go mod init "agn.local/build/$name" >/dev/null 2>&1; }
   go get "$module@$version" >/dev/null
   go build -trimpath -ldflags "${LDFLAGS:-} -s -w" -o "$out/bin/" "$@")
}

if [ ! -x "$out/bin/kind" ]; then
  say "kind $KIND_VERSION"
  GOBIN="$out/bin" go install "sigs.k8s.io/kind@$KIND_VERSION"
fi

k8s_cmds=(kubeadm kubelet kubectl kube-apiserver kube-controller-manager kube-scheduler kube-proxy)
missing=0; for c in "${k8s_cmds[@]}"; do [ -x "$out/bin/$c" ] || missing=1; done
if [ "$missing" = 1 ]; then
  say "kubernetes $KUBERNETES_VERSION (the module proxy serves it without staging/: each staging module is replaced by its release)"
  dir="$out/work/kubernetes"; mkdir -p "$dir"
  staging=(api apiextensions-apiserver apimachinery apiserver cli-runtime client-go cloud-provider
           cluster-bootstrap code-generator component-base component-helpers controller-manager cri-api
           cri-client csi-translation-lib dynamic-resource-allocation endpointslice kms kube-aggregator
           kube-controller-manager kube-proxy kube-scheduler kubectl kubelet metrics mount-utils
           pod-security-admission sample-apiserver sample-cli-plugin sample-controller)
  {
    echo "module agn.local/build/kubernetes"
    echo
    echo "go 1.22.0"
    echo
    echo "require k8s.io/kubernetes $KUBERNETES_VERSION"
    echo
    echo "replace ("
    for s in "${staging[@]}"; do echo "	k8s.io/$s => k8s.io/$s $KUBERNETES_STAGING_VERSION"; done
    echo ")"
  } > "$dir/go.mod"
  minor="${KUBERNETES_VERSION#v1.}"; minor="${minor%%.*}"
  vpkgs=(k8s.io/component-base/version k8s.io/client-go/pkg/version)
  LDFLAGS=""
  for p in "${vpkgs[@]}"; do
    LDFLAGS+=" -X $p.gitVersion=$KUBERNETES_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$minor"
    LDFLAGS+=" -X $p.gitTreeState=clean -X $p.gitCommit=0000000000000000000000000000000000000000"
    LDFLAGS+=" -X $p.buildDate=1970-01-01T00:00:00Z"
  done
  pkgs=(); for c in "${k8s_cmds[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/$c"); done
  (cd "$dir" && go mod download k8s.io/kubernetes && go build -trimpath -ldflags "$LDFLAGS -s -w" -o "$out/bin/" "${pkgs[@]}")
fi

if [ ! -x "$out/bin/etcd" ]; then
  say "etcd $ETCD_VERSION"
  build_in_module etcd go.etcd.io/etcd/server/v3 "$ETCD_VERSION" go.etcd.io/etcd/server/v3
  mv "$out/bin/server" "$out/bin/etcd"  # go names it after the path element before /v3
fi
if [ ! -x "$out/bin/etcdctl" ]; then
  say "etcdctl $ETCD_VERSION"
  build_in_module etcdctl go.etcd.io/etcd/etcdctl/v3 "$ETCD_VERSION" go.etcd.io/etcd/etcdctl/v3
fi
if [ ! -x "$out/bin/coredns" ]; then
  say "coredns $COREDNS_VERSION"
  build_in_module coredns github.com/coredns/coredns "$COREDNS_VERSION" github.com/coredns/coredns
fi
if [ ! -x "$out/bin/crictl" ]; then
  say "crictl $CRI_TOOLS_VERSION"
  GOTOOLCHAIN="$CRI_TOOLS_GO_TOOLCHAIN" build_in_module crictl sigs.k8s.io/cri-tools "$CRI_TOOLS_VERSION" sigs.k8s.io/cri-tools/cmd/crictl
fi
if [ ! -x "$out/bin/pause" ]; then
  say "pause (pause.c from the kubernetes module)"
  src="$(cd "$out/work/kubernetes" && go list -m -f '{{.Dir}}' k8s.io/kubernetes)/build/pause/linux/pause.c"
  gcc -Os -Wall -Werror -static -DVERSION="v$PAUSE_IMAGE_TAG-agn" -o "$out/bin/pause" "$src"
  strip "$out/bin/pause"
fi
say "done: $(ls "$out/bin" | tr '\n' ' ')"
