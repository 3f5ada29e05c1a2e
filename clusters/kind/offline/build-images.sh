#!/usr/bin/env bash
# Builds, on a host that reaches only package registries, every image a kind run of this suite needs:
#   - the kind node image (NODE_IMAGE): Debian bookworm by debootstrap, kind's base files, Kubernetes,
#     etcd, CoreDNS, crictl and pause built from the Go module proxy, the control-plane images
#     preloaded into containerd;
#   - a Python base image (PYTHON_BASE_IMAGE): Debian bookworm with python3 and python3-venv;
#   - the project image (PROJECT_IMAGE): reference/Dockerfile on that base, installed from a
#     wheelhouse built on the host, with `docker build --network none`.
# Idempotent: every step leaves a stamp under the cache and is skipped when its stamp and image exist.
# Records every version it used in $CACHE/versions.txt.
#
#   clusters/kind/offline/build-images.sh [--cache DIR] [--only node|python|project|rootfs] [--force]
#                                         [--project-tag TAG]
#
# Needs: a running Docker engine (see docker-engine.sh), debootstrap, go, gcc, git, python3 with pip.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../../.." && pwd)"
# shellcheck source=versions.env
. "$here/versions.env"
cache="${AGN_KIND_CACHE:-/var/cache/agn-conformance/kind-offline}"
only=""; force=0
while [ $# -gt 0 ]; do
  case "$1" in
    --cache) cache="$2"; shift 2 ;;
    --only) only="$2"; shift 2 ;;
    --force) force=1; shift ;;
    --project-tag) PROJECT_IMAGE="$2"; shift 2 ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
done
mirror="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
mkdir -p "$cache/stamps"
start_all=$(date +%s)
say() { printf '[build-images %4ss] %s\n' "$(( $(date +%s) - start_all ))" "$*" >&2; }
have_image() { docker image inspect "$1" >/dev/null 2>&1; }
stamp_file() { printf '%s/stamps/%s' "$cache" "$(printf '%s' "$1" | tr '/:' '__')"; }
done_step() { [ "$force" = 0 ] && [ -f "$(stamp_file "$1")" ] && { [ -z "${2:-}" ] || have_image "$2"; }; }
stamp() { date -u +%FT%TZ > "$(stamp_file "$1")"; }
# What a step leaves behind is removed on every exit, success, failure or Ctrl-C.
scratch_dirs=(); scratch_boxes=()
cleanup() {
  local d b
  for b in "${scratch_boxes[@]}"; do docker rm -f "$b" >/dev/null 2>&1 || true; done
  for d in "${scratch_dirs[@]}"; do rm -rf "$d"; done
}
trap cleanup EXIT
trap 'exit 130' INT TERM
scratch_dir() { printf -v "$1" '%s' "$(mktemp -d)"; scratch_dirs+=("${!1}"); }  # name of the variable to set

for tool in docker debootstrap go gcc python3; do
  command -v "$tool" >/dev/null || { echo "build-images: $tool is not installed (see docs/backends/air-gapped.md)" >&2; exit 1; }
done
docker info >/dev/null 2>&1 || { echo "build-images: no Docker engine answers; start one with $here/docker-engine.sh start" >&2; exit 1; }

rootfs_image() {  # name, tag, extra packages: debootstrap a bookworm rootfs and docker-import it
  local name="$1" tag="$2" packages="$3" dir="$cache/rootfs/$1"
  if done_step "rootfs-$name-$DEBIAN_SUITE" "$tag"; then say "rootfs $name: cached ($tag)"; return; fi
  say "rootfs $name: debootstrap $DEBIAN_SUITE (minbase + $packages)"
  rm -rf "$dir"; mkdir -p "$dir"
  debootstrap --variant=minbase --include="$packages" "$DEBIAN_SUITE" "$dir" "$mirror" > "$cache/rootfs-$name.log" 2>&1 \
    || { tail -20 "$cache/rootfs-$name.log" >&2; exit 1; }
  chroot "$dir" apt-get clean
  rm -rf "$dir"/var/lib/apt/lists/* "$dir"/var/cache/apt/*.bin "$dir"/dev/*
  say "rootfs $name: docker import as $tag"
  tar -C "$dir" --numeric-owner -c . | docker import --change 'CMD ["/bin/bash"]' - "$tag" >/dev/null
  rm -rf "$dir"
  stamp "rootfs-$name-$DEBIAN_SUITE"
}

build_binaries() {
  if done_step "binaries-$KUBERNETES_VERSION-$ETCD_VERSION-$COREDNS_VERSION-$CRI_TOOLS_VERSION-$KIND_VERSION"; then
    say "binaries: cached"; return; fi
  say "binaries: building from the Go module proxy (Kubernetes takes most of the time)"
  "$here/build-binaries.sh" "$cache/build"
  stamp "binaries-$KUBERNETES_VERSION-$ETCD_VERSION-$COREDNS_VERSION-$CRI_TOOLS_VERSION-$KIND_VERSION"
}

component_image() {  # tag, base, entrypoint json, binaries...
  local tag="$1" base="$2" entry="$3"; shift 3
  local ctx; scratch_dir ctx
  cp "${@/#/$cache/build/bin/}" "$ctx/"
  {
    echo "FROM $base"
    for b in "$@"; do echo "COPY $b /usr/local/bin/$b"; done
    [ "$base" = scratch ] && [ " $* " = " coredns " ] && echo "COPY coredns /coredns"
    [ "$base" = scratch ] && [ " $* " = " pause " ] && echo "COPY pause /pause"
    echo 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin'
    [ -n "$entry" ] && echo "ENTRYPOINT $entry"
  } > "$ctx/Dockerfile"
  docker build --network none --force-rm -q -t "$tag" "$ctx" >/dev/null
  rm -rf "$ctx"
}

build_rootfs_node() {
  rootfs_image node agn-conformance/kind-rootfs:bookworm \
    "systemd,systemd-sysv,dbus,conntrack,iptables,nftables,iproute2,ethtool,util-linux,mount,kmod,libseccomp2,pigz,bash,ca-certificates,jq,procps,containerd,runc,containernetworking-plugins,socat,ebtables,ipset"
}

build_rootfs_iptables() {
  rootfs_image iptables agn-conformance/iptables-base:bookworm "iptables,conntrack,ipset,nftables,kmod,ca-certificates"
}

build_node() {
  if done_step "node-$NODE_IMAGE" "$NODE_IMAGE"; then say "node image: cached ($NODE_IMAGE)"; return; fi
  build_binaries
  build_rootfs_node
  build_rootfs_iptables
  say "component images: kube-apiserver, -controller-manager, -scheduler, -proxy, etcd, coredns, pause"
  local r=registry.k8s.io v="$KUBERNETES_VERSION"
  component_image "$r/kube-apiserver:$v" scratch "" kube-apiserver
  component_image "$r/kube-controller-manager:$v" scratch "" kube-controller-manager
  component_image "$r/kube-scheduler:$v" scratch "" kube-scheduler
  component_image "$r/kube-proxy:$v" agn-conformance/iptables-base:bookworm "" kube-proxy
  component_image "$r/etcd:$ETCD_IMAGE_TAG" scratch "" etcd etcdctl
  component_image "$r/coredns/coredns:$COREDNS_VERSION" scratch '["/coredns"]' coredns
  component_image "$r/pause:$PAUSE_IMAGE_TAG" scratch '["/pause"]' pause
  local images=("$r/kube-apiserver:$v" "$r/kube-controller-manager:$v" "$r/kube-scheduler:$v" "$r/kube-proxy:$v"
                "$r/etcd:$ETCD_IMAGE_TAG" "$r/coredns/coredns:$COREDNS_VERSION" "$r/pause:$PAUSE_IMAGE_TAG")

  say "node base: kind $KIND_VERSION images/base/files + the binaries"
  local ctx; scratch_dir ctx
  local kind_src="$cache/build/gopath/pkg/mod/sigs.k8s.io/kind@$KIND_VERSION"
  cp -r "$here/node/." "$ctx/"
  mkdir -p "$ctx/kind-files" "$ctx/bin"
  cp -r "$kind_src/images/base/files/." "$ctx/kind-files/"
  chmod -R u+w "$ctx/kind-files"
  cp "$cache/build/bin/"{kubeadm,kubelet,kubectl,crictl} "$ctx/bin/"
  docker build --network none --force-rm -q --build-arg ROOTFS_IMAGE=agn-conformance/kind-rootfs:bookworm \
    --build-arg KUBERNETES_VERSION="$KUBERNETES_VERSION" -t agn-conformance/kind-node-base:bookworm "$ctx" >/dev/null
  rm -rf "$ctx"

  say "node image: preloading ${#images[@]} images into containerd's k8s.io namespace"
  local box; box="$(docker run -d --privileged --network none --entrypoint /usr/bin/containerd agn-conformance/kind-node-base:bookworm)"
  scratch_boxes+=("$box")
  for _ in $(seq 1 60); do docker exec "$box" ctr version >/dev/null 2>&1 && break; sleep 0.5; done
  docker save "${images[@]}" | docker exec -i "$box" ctr --namespace=k8s.io images import \
    --label=io.cri-containerd.pinned=pinned --all-platforms --no-unpack - >/dev/null
  docker exec "$box" ctr --namespace=k8s.io images ls -q | sed 's/^/  /' >&2
  docker exec "$box" sh -c 'kill -TERM 1' || true
  docker wait "$box" >/dev/null || true
  # STOPSIGNAL stays as the base image set it (docker commit cannot change it, and need not)
  docker commit \
    --change 'ENTRYPOINT ["/usr/local/bin/agn-entrypoint", "/usr/local/bin/entrypoint", "/sbin/init"]' \
    --change 'CMD []' --change 'ENV container=docker' \
    "$box" "$NODE_IMAGE" >/dev/null
  stamp "node-$NODE_IMAGE"
  say "node image: $NODE_IMAGE"
}

build_python() {
  rootfs_image python "$PYTHON_BASE_IMAGE" "python3,python3-venv,ca-certificates"
}

build_project() {
  build_python
  local rev; rev="$(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo unknown)"
  say "project image: wheelhouse on the host (the project and reference/constraints.txt)"
  local ctx; scratch_dir ctx
  (cd "$repo" && git ls-files -z --cached --others --exclude-standard | xargs -0 -I{} cp --parents {} "$ctx/" 2>/dev/null || true)
  # The image's python3 is Debian's 3.11: the host's interpreter must be a 3.11 too, so the
  # wheels it builds and picks carry the same tags.
  local pyver; pyver="$(python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
  [ "$pyver" = 3.11 ] || { echo "build-images: the wheelhouse needs a host python3 3.11 (found $pyver)" >&2; exit 1; }
  # a venv of its own: the calling interpreter may have no pip (a tox env made by uv)
  local wheeler="$cache/wheel-venv"
  [ -x "$wheeler/bin/pip" ] || python3 -m venv --clear "$wheeler"
  "$wheeler/bin/pip" wheel --quiet --disable-pip-version-check --wheel-dir "$ctx/.wheelhouse" \
    --constraint "$repo/reference/constraints.txt" "$ctx"
  say "project image: docker build --network none on $PYTHON_BASE_IMAGE ($rev)"
  docker build --network none --force-rm -q -f "$ctx/reference/Dockerfile" --build-arg BASE_IMAGE="$PYTHON_BASE_IMAGE" \
    --build-arg WHEELHOUSE=.wheelhouse -t "$PROJECT_IMAGE" "$ctx" >/dev/null
  rm -rf "$ctx"
  stamp "project-$PROJECT_IMAGE"
  say "project image: $PROJECT_IMAGE"
}

record_versions() {
  {
    echo "# what build-images.sh used, $(date -u +%FT%TZ)"
    grep -v '^#' "$here/versions.env"
    echo "DOCKER_SERVER=$(docker version -f '{{.Server.Version}}' 2>/dev/null)"
    echo "GO_HOST=$(go version | awk '{print $3}')"
    echo "DEBIAN_MIRROR=$mirror"
    for img in "$NODE_IMAGE" "$PYTHON_BASE_IMAGE" "$PROJECT_IMAGE"; do
      have_image "$img" && echo "IMAGE $img $(docker image inspect -f '{{.Id}}' "$img")"
    done
    if have_image agn-conformance/kind-rootfs:bookworm; then
      echo "NODE_PACKAGES $(docker run --rm --network none agn-conformance/kind-rootfs:bookworm dpkg-query -W -f '${Package}=${Version} ' containerd runc containernetworking-plugins systemd iptables)"
    fi
  } > "$cache/versions.txt"
}

case "$only" in
  "") build_node; build_project ;;
  node) build_node ;;
  rootfs) build_rootfs_node; build_rootfs_iptables; build_python ;;
  python) build_python ;;
  project) build_project ;;
  *) echo "--only takes node, python, project or rootfs" >&2; exit 2 ;;
esac
record_versions
say "done in $(( $(date +%s) - start_all ))s; versions in $cache/versions.txt"
