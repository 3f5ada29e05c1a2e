#!/usr/bin/env bash
# Starts or stops a Docker engine for kind on a host where Docker is installed but not running,
# with every bridge, pool and network inside 198.19.0.0/17 and nothing forwarded off the machine.
#
#   docker-engine.sh start    # dockerd in the background, the kind network, the DOCKER-USER drop rule
#   docker-engine.sh stop     # stops dockerd (and with it every container) and removes the rule
#   docker-engine.sh status
#
# Environment: AGN_DOCKER_ROOT (data root, default /var/lib/agn-docker), AGN_DOCKER_SOCKET
# (default /var/run/docker.sock), AGN_DOCKER_EXTERNAL_IF (default: the default route's interface).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="${AGN_DOCKER_ROOT:-/var/lib/agn-docker}"
sock="${AGN_DOCKER_SOCKET:-/var/run/docker.sock}"
state="$root-state"
bridge_cidr="198.19.0.1/24"
pool_base="198.19.16.0/20"
kind_subnet="198.19.1.0/24"
kind_gateway="198.19.1.1"
say() { printf '[docker-engine] %s\n' "$*" >&2; }
dk() { docker -H "unix://$sock" "$@"; }

external_if() {
  if [ -n "${AGN_DOCKER_EXTERNAL_IF:-}" ]; then echo "$AGN_DOCKER_EXTERNAL_IF"; return; fi
  ip route show default | awk '{for (i = 1; i < NF; i++) if ($i == "dev") { print $(i + 1); exit }}'
}

lacks_sys_resource() {  # CAP_SYS_RESOURCE is bit 24 of the bounding set
  local bnd; bnd="$(awk '/^CapBnd:/ {print $2}' /proc/self/status)"
  (( (16#$bnd >> 24 & 1) == 0 ))
}

write_config() {
  mkdir -p "$state"
  local runtime_json=""
  if lacks_sys_resource; then
    say "root lacks CAP_SYS_RESOURCE here: privileged containers get runc without it"
    install -m 0755 "$here/runc-drop-sys-resource" "$state/runc-drop-sys-resource"
    runtime_json=", \"runtimes\": {\"agn-runc\": {\"path\": \"$state/runc-drop-sys-resource\"}}, \"default-runtime\": \"agn-runc\""
  fi
  # "dns": what containers' lookups pass upstream (Docker's embedded DNS, CoreDNS's forward) goes to the
  # host's bridge address, where nothing answers at once, instead of to the host's resolvers off the
  # machine (which the DOCKER-USER rule would drop, after a timeout)
  cat > "$state/daemon.json" <<JSON
{
  "bip": "$bridge_cidr",
  "dns": ["${bridge_cidr%/*}"],
  "default-address-pools": [{"base": "$pool_base", "size": 24}],
  "storage-driver": "overlay2",
  "ipv6": false,
  "ip6tables": false,
  "registry-mirrors": [],
  "max-concurrent-downloads": 1
  $runtime_json
}
JSON
}

running() { [ -S "$sock" ] && dk info >/dev/null 2>&1; }

# Every kind node runs systemd, kubelet and kube-proxy, each holding inotify instances: past a few
# clusters at Linux's default 128 instances kube-proxy exits with "too many open files" and the
# cluster's Services stop working (a full run holds up to nine clusters). These are kind's own
# documented values; a limit already higher is left alone.
raise_inotify_limits() {
  local key want have
  for pair in fs.inotify.max_user_instances=512 fs.inotify.max_user_watches=524288; do
    key="${pair%=*}"; want="${pair#*=}"; have="$(sysctl -n "$key")"
    if [ "$have" -lt "$want" ]; then
      say "raising $key from $have to $want (kind nodes need it)"
      sysctl -qw "$key=$want"
    fi
  done
}

start() {
  if running; then say "already running on $sock"; else
    write_config
    say "starting dockerd (data root $root, socket $sock, bridge $bridge_cidr, pools $pool_base)"
    nohup dockerd --config-file "$state/daemon.json" --data-root "$root" --exec-root "$state/exec" \
      --pidfile "$state/dockerd.pid" -H "unix://$sock" > "$state/dockerd.log" 2>&1 &
    for _ in $(seq 1 120); do running && break; sleep 0.5; done
    running || { say "dockerd did not come up; its log:"; tail -20 "$state/dockerd.log" >&2; exit 1; }
  fi
  local ext; ext="$(external_if)"
  if [ -n "$ext" ] && ! iptables -C DOCKER-USER -o "$ext" -j DROP 2>/dev/null; then
    say "DOCKER-USER: dropping everything forwarded out of $ext"
    iptables -I DOCKER-USER -o "$ext" -j DROP
  fi
  if ! dk network inspect kind >/dev/null 2>&1; then
    say "creating the kind network ($kind_subnet)"
    dk network create --driver bridge --subnet "$kind_subnet" --gateway "$kind_gateway" \
      -o com.docker.network.bridge.enable_ip_masquerade=true -o com.docker.network.driver.mtu=1500 kind >/dev/null
  fi
  raise_inotify_limits
  say "ready: export DOCKER_HOST=unix://$sock"
}

stop() {
  local ext; ext="$(external_if)"
  if [ -f "$state/dockerd.pid" ]; then
    local pid; pid="$(cat "$state/dockerd.pid")"
    if kill -0 "$pid" 2>/dev/null; then
      say "stopping dockerd ($pid) and its containers"
      dk ps -q | xargs -r docker -H "unix://$sock" rm -f >/dev/null 2>&1 || true
      kill "$pid"
      for _ in $(seq 1 60); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
    fi
  fi
  if [ -n "$ext" ]; then iptables -D DOCKER-USER -o "$ext" -j DROP 2>/dev/null || true; fi
  pkill -f "containerd --config $state" 2>/dev/null || true
  say "stopped"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  status) if running; then say "running on $sock"; else say "not running"; exit 1; fi ;;
  *) echo "usage: $0 start|stop|status" >&2; exit 2 ;;
esac
