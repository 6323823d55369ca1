#!/usr/bin/env bash
# Real nodes for the local control plane: a kubelet and containerd per node, each node in a network
# namespace of its own, pods on the CNI bridge plugin, and CoreDNS for the cluster's names. Called by
# hack/cluster.sh (`up --real-nodes N`, `down`); see docs/control-plane.md.
#
#   hack/realnodes.sh build                 build or reuse containerd, CoreDNS and the images
#   hack/realnodes.sh up STATE KUBECONFIG N PROFILE [LOG_MAX_SIZE]
#   hack/realnodes.sh down STATE            remove everything up made, restore the sysctls
#   hack/realnodes.sh stop-node STATE I     stop node I's kubelet and containerd (a lost node)
#   hack/realnodes.sh start-node STATE I    start them again
#   hack/realnodes.sh ctr STATE I ARGS...   ctr against node I's containerd
#
# Addresses (every range is routed into the namespaces made here, or unreachable):
#   10.250.0.0/24  the nodes' bridge rcbr0 in the root namespace: .1 the host, .2 CoreDNS, .1I node I
#   10.245.I.0/24  node I's pods, on the bridge cni0 inside node I's namespace
#   10.96.0.0/16   Services (headless ones need no address; ClusterIPs are unreachable: no kube-proxy)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
HACK=$ROOT/hack
CACHE=${ROLLCALL_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/rollcall}
CONTAINERD_VERSION=v2.2.9
COREDNS_VERSION=v1.14.7
NODE_BIN=$CACHE/node-$CONTAINERD_VERSION-coredns-$COREDNS_VERSION
GO=${GO:-$(command -v go || echo /usr/local/go/bin/go)}
CNI_BIN=${CNI_BIN:-/usr/lib/cni}
RUNC=${RUNC:-$(command -v runc || echo /usr/sbin/runc)}

BRIDGE=rcbr0
HOST_IP=10.250.0.1
DNS_IP=10.250.0.2
NODE_NET=10.250.0
POD_NET=10.245
#: Ranges that must never leave by the default route.
GUARDED=(10.250.0.0/16 10.245.0.0/16 10.244.0.0/16 10.96.0.0/16)
#: Global sysctls the kubelet changes at start; restored on the way down.
SYSCTLS=(vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops kernel.keys.root_maxkeys
  kernel.keys.root_maxbytes)
CGROUP_PREFIX=rollcall-node
#: Host paths the kubelet, containerd or the CNI plugins may create whatever they are told; those that did
#: not exist before `up` are removed by `down`, and links into the cluster's directory always are.
HOST_PATHS=(/var/lib/kubelet /var/log/containers /var/log/pods /var/lib/cni /run/netns /etc/kubernetes
  /opt/containerd /run/containerd)
K8S_BIN=

log() { printf '[real-nodes] %s\n' "$*" >&2; }
die() {
  log "error: $*"
  exit 1
}
# shellcheck source=hack/lib.sh
. "$HACK/lib.sh"

node_ip() { echo "$NODE_NET.$((10 + $1))"; }
netns_of() { echo "rollcall-node-$1"; }
netns_path() { echo "/run/netns/$(netns_of "$1")"; }
in_node() { # I CMD... : run in node I's network namespace, keeping the host's mount namespace
  local i=$1
  shift
  nsenter --net="$(netns_path "$i")" "$@"
}

# ---------------------------------------------------------------- build

node_stamp() {
  {
    echo "$CONTAINERD_VERSION $COREDNS_VERSION $("$GO" env GOVERSION)"
    cat "$HACK/node-bin/coredns/go.mod" "$HACK/node-bin/coredns/go.sum" "$HACK/node-bin/coredns/main.go"
  } | sha256sum | cut -d' ' -f1
}

cmd_build() {
  mkdir -p "$NODE_BIN"
  {
    flock 9
    if [[ ! -f $NODE_BIN/.stamp || $(cat "$NODE_BIN/.stamp") != "$(node_stamp)" ]]; then
      build_binaries
    fi
  } 9>"$NODE_BIN/.lock"
  mkdir -p "$CACHE/containerd-seed"
  {
    flock 9
    build_seed
  } 9>"$CACHE/containerd-seed/.lock"
  echo "$NODE_BIN"
}

# The nodes' containerd root with the pause and bert images imported, built once per containerd version and
# images, then given to each node of each cluster as hard links (seed_root): importing the 5.7 GB image into
# every node took 100-200 s of every cluster's start and wrote 23 GB. Its files are the images' blobs and
# unpacked layers, which containerd does not write again; its bolt databases, which it does, are copied.
seed_dir() {
  local pause bert
  pause=$("$HACK/image.sh" pause)
  bert=$("$HACK/image.sh" bert)
  echo "$CACHE/containerd-seed/$(echo "$CONTAINERD_VERSION $(basename "$pause") $(basename "$bert")" |
    sha256sum | cut -c1-16)"
}

build_seed() {
  local seed start=$SECONDS tmp pid image
  seed=$(seed_dir)
  [[ -d $seed/root ]] && return
  log "importing the images into the nodes' containerd seed (about 100 s, once per image)"
  tmp=$(mktemp -d "$CACHE/containerd-seed/.build.XXXXXX")
  {
    echo 'version = 3'
    echo "root = \"$tmp/root\""
    echo "state = \"$tmp/state\""
    echo "temp = \"$tmp/tmp\""
    echo 'imports = []'
    echo 'disabled_plugins = ["io.containerd.grpc.v1.cri", "io.containerd.cri.v1.runtime", "io.containerd.nri.v1.nri"]'
    echo '[grpc]'
    echo "  address = \"$tmp/containerd.sock\""
    echo '[ttrpc]'
    echo "  address = \"$tmp/containerd.sock.ttrpc\""
    echo '[plugins."io.containerd.internal.v1.opt"]'
    echo "  path = \"$tmp/opt\""
  } >"$tmp/containerd.toml"
  setsid "$NODE_BIN/containerd" --config "$tmp/containerd.toml" </dev/null >"$tmp/containerd.log" 2>&1 &
  pid=$!
  local deadline=$((SECONDS + 60))
  until "$NODE_BIN/ctr" --address "$tmp/containerd.sock" version >/dev/null 2>&1; do
    if ((SECONDS >= deadline)); then
      kill "$pid" 2>/dev/null
      tail -20 "$tmp/containerd.log" >&2
      die "the seed's containerd did not start"
    fi
    sleep 0.2
  done
  for image in pause bert; do
    if ! "$NODE_BIN/ctr" --address "$tmp/containerd.sock" -n k8s.io images import \
      "$("$HACK/image.sh" "$image")" >>"$tmp/import.log" 2>&1; then
      kill "$pid" 2>/dev/null
      tail -5 "$tmp/import.log" >&2
      die "image import into the containerd seed failed"
    fi
  done
  kill "$pid"
  wait "$pid" 2>/dev/null || true
  mkdir -p "$seed"
  mv "$tmp/root" "$seed/root"
  rm -rf "$tmp"
  # one seed at a time: those of images no longer built go
  find "$CACHE/containerd-seed" -mindepth 1 -maxdepth 1 -type d ! -path "$seed" -exec rm -rf {} +
  log "containerd seed built in $((SECONDS - start))s"
}

# seed_root DIR: node DIR's containerd root, hard links to the seed's files but copies of its databases.
seed_root() {
  local dir=$1 seed db
  seed=$(seed_dir)/root
  [[ -d $seed ]] || die "no containerd seed at $seed: run hack/realnodes.sh build"
  mkdir -p "$dir/containerd"
  cp -al "$seed" "$dir/containerd/root"
  while IFS= read -r -d '' db; do
    cp --remove-destination "$seed/${db#"$dir/containerd/root/"}" "$db"
  done < <(find "$dir/containerd/root" -name '*.db' -print0)
}

build_binaries() {
  local start=$SECONDS tmp
  tmp=$(mktemp -d "$NODE_BIN/.build.XXXXXX")
  export GOTOOLCHAIN=local CGO_ENABLED=0
  log "building containerd $CONTAINERD_VERSION (about 2 min cold) and CoreDNS $COREDNS_VERSION (about 3 min)"
  GOBIN=$tmp GOFLAGS= "$GO" install -trimpath -tags "no_btrfs no_devmapper no_zfs" \
    -ldflags "-s -w -X github.com/containerd/containerd/v2/version.Version=$CONTAINERD_VERSION" \
    "github.com/containerd/containerd/v2/cmd/containerd@$CONTAINERD_VERSION" \
    "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2@$CONTAINERD_VERSION" \
    "github.com/containerd/containerd/v2/cmd/ctr@$CONTAINERD_VERSION" >"$tmp/containerd.log" 2>&1 ||
    { tail -20 "$tmp/containerd.log" >&2; die "containerd build failed"; }
  GOFLAGS=-mod=mod "$GO" -C "$HACK/node-bin/coredns" build -trimpath -ldflags "-s -w" -o "$tmp/coredns" . \
    >"$tmp/coredns.log" 2>&1 || { tail -20 "$tmp/coredns.log" >&2; die "CoreDNS build failed"; }
  mv -f "$tmp"/containerd "$tmp"/containerd-shim-runc-v2 "$tmp"/ctr "$tmp"/coredns "$NODE_BIN/"
  rm -rf "$tmp"
  node_stamp >"$NODE_BIN/.stamp"
  log "node binaries built in $((SECONDS - start))s"
}

# ---------------------------------------------------------------- up

cmd_up() {
  local state=$1 kubeconfig=$2 count=$3 profile=$4 log_max=${5:-10Mi}
  local i
  ((count >= 1 && count <= 8)) || die "real nodes: 1 to 8, not $count"
  [[ ! -e /sys/class/net/$BRIDGE ]] || die "$BRIDGE exists: another cluster has real nodes (hack/cluster.sh down it)"
  K8S_BIN=$("$HACK/cluster.sh" bin-dir)
  [[ -x $RUNC && -x $CNI_BIN/bridge ]] ||
    die "runc and the CNI plugins are needed: apt-get install -y runc containernetworking-plugins"
  cmd_build >/dev/null
  mkdir -p "$state"
  echo "$count" >"$state/count"
  save_sysctls "$state"
  local path
  for path in "${HOST_PATHS[@]}"; do
    [[ -e $path ]] || echo "$path"
  done >"$state/host-paths-created"
  network_up "$state" "$count"
  coredns_up "$state" "$kubeconfig"
  for ((i = 0; i < count; i++)); do
    node_up "$state" "$kubeconfig" "$i" "$profile"
  done
  for ((i = 0; i < count; i++)); do
    kubelet_up "$state/node-$i" "$i" "$log_max"
  done
  local kubectl=("$K8S_BIN/kubectl" --kubeconfig "$kubeconfig")
  for ((i = 0; i < count; i++)); do
    node_ready "$state" "$i" "$profile" "${kubectl[@]}"
  done
}

save_sysctls() {
  local state=$1 key
  [[ -f $state/sysctls ]] && return
  for key in "${SYSCTLS[@]}"; do
    echo "$key=$(sysctl -n "$key")"
  done >"$state/sysctls"
}

network_up() {
  local state=$1 count=$2 i j range
  ip link add "$BRIDGE" type bridge
  echo "$BRIDGE" >"$state/bridge"
  ip addr add "$HOST_IP/24" dev "$BRIDGE"
  ip addr add "$DNS_IP/32" dev "$BRIDGE"
  ip link set "$BRIDGE" up
  for range in "${GUARDED[@]}"; do
    ip route add unreachable "$range"
  done
  for ((i = 0; i < count; i++)); do
    ip netns add "$(netns_of "$i")"
    ip link add "rcveth$i" type veth peer name eth0 netns "$(netns_of "$i")"
    ip link set "rcveth$i" master "$BRIDGE" up
    in_node "$i" ip addr add "$(node_ip "$i")/24" dev eth0
    in_node "$i" ip link set lo up
    in_node "$i" ip link set eth0 up
    # Forwarding between the node's pods and the bridge: inside the node's namespace only.
    in_node "$i" sysctl -qw net.ipv4.ip_forward=1
    ip route add "$POD_NET.$i.0/24" via "$(node_ip "$i")"
  done
  for ((i = 0; i < count; i++)); do
    for ((j = 0; j < count; j++)); do
      ((i == j)) || in_node "$i" ip route add "$POD_NET.$j.0/24" via "$(node_ip "$j")"
    done
  done
  # Nothing for the cluster's ranges may take the default route.
  for range in "${GUARDED[@]}"; do
    check_inside "${range%/*}"
  done
  for ((i = 0; i < count; i++)); do
    check_inside "$POD_NET.$i.2"
  done
}

check_inside() { # ADDRESS: the root namespace routes it into the bridge, or nowhere
  local route
  route=$(ip route get "$1" 2>&1 || true)
  [[ $route == *"dev $BRIDGE"* || $route == *unreachable* || $route == *"No route to host"* || $route == *"dev lo"* || $route == local* ]] ||
    die "address $1 would leave by another route: $route"
}

coredns_up() {
  local state=$1 kubeconfig=$2
  mkdir -p "$state/coredns"
  cat >"$state/coredns/Corefile" <<EOF
.:53 {
    bind $DNS_IP
    ready $DNS_IP:8181
    errors
    cache 5
    kubernetes cluster.local {
        kubeconfig $kubeconfig
        pods verified
        ttl 5
    }
}
EOF
  setsid "$NODE_BIN/coredns" -conf "$state/coredns/Corefile" </dev/null >"$state/coredns/coredns.log" 2>&1 &
  echo $! >"$state/coredns/pid"
  local deadline=$((SECONDS + 60))
  until curl -sf "http://$DNS_IP:8181/ready" >/dev/null 2>&1; do
    ((SECONDS < deadline)) || { tail -20 "$state/coredns/coredns.log" >&2; die "CoreDNS did not become ready"; }
    sleep 0.2
  done
}

# make_cgroup PATH: the node's cgroup in every v1 controller (cpuset needs its cpus and mems filled in).
make_cgroup() {
  local name=$1 dir
  for dir in /sys/fs/cgroup/*/; do
    [[ -f $dir/cgroup.procs && ! -L ${dir%/} ]] || continue
    mkdir -p "$dir$name"
    if [[ -f $dir/cpuset.cpus ]]; then
      cat "$dir/cpuset.cpus" >"$dir$name/cpuset.cpus"
      cat "$dir/cpuset.mems" >"$dir$name/cpuset.mems"
    fi
  done
}

# node_up STATE KUBECONFIG I PROFILE: node I's directory, its forwarders to the apiserver, its CNI and its
# containerd, started.
node_up() {
  local state=$1 kubeconfig=$2 i=$3 profile=$4
  local dir=$state/node-$i name api_port
  name=$(node_name "$profile" "$i")
  mkdir -p "$dir"/{containerd/tmp,cni,kubelet,pod-logs,runc}
  echo "$name" >"$dir/name"
  echo "$profile" >"$dir/profile"
  api_port=$(sed -n 's#.*server: https://127.0.0.1:\([0-9]*\).*#\1#p' "$kubeconfig" | head -1)
  [[ -n $api_port ]] || die "no https://127.0.0.1:<port> server in $kubeconfig"
  # The apiserver listens on the host's loopback: a forwarder carries the node's loopback port to it.
  setsid socat "UNIX-LISTEN:$dir/api.sock,fork,unlink-early" "TCP:127.0.0.1:$api_port" \
    </dev/null >"$dir/forward-host.log" 2>&1 &
  echo $! >"$dir/forward-host.pid"
  nsenter --net="$(netns_path "$i")" setsid socat "TCP-LISTEN:$api_port,bind=127.0.0.1,reuseaddr,fork" "UNIX-CONNECT:$dir/api.sock" \
    </dev/null >"$dir/forward-node.log" 2>&1 &
  echo $! >"$dir/forward-node.pid"

  cat >"$dir/cni/10-bridge.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "rollcall",
  "plugins": [
    {"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": false, "hairpinMode": true,
     "ipam": {"type": "host-local", "ranges": [[{"subnet": "$POD_NET.$i.0/24"}]],
              "routes": [{"dst": "0.0.0.0/0"}], "dataDir": "$dir/cni/ipam"}},
    {"type": "loopback"}
  ]
}
EOF
  cat >"$dir/containerd.toml" <<EOF
version = 3
root = "$dir/containerd/root"
state = "$dir/containerd/state"
temp = "$dir/containerd/tmp"
# Nothing from the host's /etc/containerd; nothing written outside the node's directory.
imports = []
[grpc]
  address = "$dir/containerd.sock"
[ttrpc]
  address = "$dir/containerd.sock.ttrpc"
[debug]
  level = "warn"
[plugins."io.containerd.cri.v1.images".pinned_images]
  sandbox = "rollcall.local/pause:1"
[plugins."io.containerd.internal.v1.opt"]
  path = "$dir/containerd/opt"
[plugins."io.containerd.nri.v1.nri"]
  disable = true
[plugins."io.containerd.cri.v1.runtime"]
  enable_selinux = false
  enable_cdi = false
  netns_mounts_under_state_dir = true
  # Root cannot lower oom_score_adj here (no CAP_SYS_RESOURCE).
  restrict_oom_score_adj = true
  [plugins."io.containerd.cri.v1.runtime".cni]
    bin_dirs = ["$CNI_BIN"]
    conf_dir = "$dir/cni"
  [plugins."io.containerd.cri.v1.runtime".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
        BinaryName = "$RUNC"
        Root = "$dir/runc"
        SystemdCgroup = false
EOF
  seed_root "$dir"  # the images, imported once (build_seed)
  start_containerd "$dir" "$i"
  cp "$kubeconfig" "$dir/kubeconfig"
}

# kubelet_up DIR I LOG_MAX_SIZE: node I's cgroup and kubelet configuration; its kubelet, started.
kubelet_up() {
  local dir=$1 i=$2 log_max=$3
  make_cgroup "$CGROUP_PREFIX-$i"
  : >"$dir/resolv.base"
  cat >"$dir/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# cgroup v1 only on this machine: supported by the kubelet until it is removed.
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: /$CGROUP_PREFIX-$i
containerRuntimeEndpoint: unix://$dir/containerd.sock
address: $(node_ip "$i")
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
# Served on the node's private address only; the local apiserver sends no client certificate.
authentication:
  anonymous: {enabled: true}
  webhook: {enabled: false}
authorization: {mode: AlwaysAllow}
clusterDNS: [$DNS_IP]
clusterDomain: cluster.local
resolvConf: $dir/resolv.base
podCIDR: $POD_NET.$i.0/24
podLogsDir: $dir/pod-logs
containerLogMaxSize: $log_max
containerLogMaxFiles: 3
containerLogMonitorInterval: 3s
failSwapOn: false
protectKernelDefaults: false
serializeImagePulls: false
maxPods: 30
nodeStatusUpdateFrequency: 4s
nodeStatusReportFrequency: 20s
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: 200Mi, nodefs.available: 2%, imagefs.available: 2%}
EOF
  start_kubelet "$dir" "$i"
}

start_containerd() { # DIR I
  local dir=$1 i=$2 name
  name=$(cat "$dir/name")
  # nsenter and setsid exec, so the pid recorded is the daemon's own.
  PATH=$NODE_BIN:$PATH nsenter --net="$(netns_path "$i")" setsid "$NODE_BIN/containerd" --config "$dir/containerd.toml" \
    </dev/null >>"$dir/containerd.log" 2>&1 &
  echo $! >"$dir/containerd.pid"
  local deadline=$((SECONDS + 60))
  until ctr_of "$dir" version >/dev/null 2>&1; do
    ((SECONDS < deadline)) || { tail -20 "$dir/containerd.log" >&2; die "containerd of $name did not start"; }
    sleep 0.2
  done
}

start_kubelet() { # DIR I
  local dir=$1 i=$2 name
  name=$(cat "$dir/name")
  PATH=$NODE_BIN:$PATH nsenter --net="$(netns_path "$i")" setsid "$K8S_BIN/kubelet" --config "$dir/kubelet.yaml" \
    --kubeconfig "$dir/kubeconfig" --root-dir "$dir/kubelet" --hostname-override "$name" \
    --cert-dir "$dir/kubelet/pki" \
    --node-ip "$(node_ip "$i")" \
    --node-labels "node.kubernetes.io/instance-type=$(cat "$dir/profile"),rollcall.test/node=real" \
    </dev/null >>"$dir/kubelet.log" 2>&1 &
  echo $! >"$dir/kubelet.pid"
}

node_name() { echo "${1//./-}-real-$2"; }
ctr_of() { # DIR ARGS... : ctr against node DIR's containerd
  local dir=$1
  shift
  "$NODE_BIN/ctr" --address "$dir/containerd.sock" "$@"
}

# node_ready STATE I PROFILE KUBECTL...: wait for Ready, then give the node the profile's fake
# accelerator and EFA capacity (through the status subresource, where it stays).
node_ready() {
  local state=$1 i=$2 profile=$3
  shift 3
  local name deadline=$((SECONDS + 120)) extended
  name=$(cat "$state/node-$i/name")
  # Ready, and the node lifecycle controller has lifted its not-ready taint (until then nothing schedules).
  until [[ $("$@" get node "$name" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}/{.spec.taints[*].key}' \
    2>/dev/null) == True/ ]]; do
    ((SECONDS < deadline)) || { tail -20 "$state/node-$i/kubelet.log" >&2; die "node $name is not Ready"; }
    sleep 0.5
  done
  extended=$(sed "s/__NODE_NAME__/$name/" "$HACK/profiles/$profile.yaml" |
    "$@" create --dry-run=client -o json -f - |
    python3 -c 'import json,sys
s = json.load(sys.stdin)["status"]
pick = lambda d: {k: v for k, v in d.items() if "/" in k}
print(json.dumps({"status": {"capacity": pick(s["capacity"]), "allocatable": pick(s["allocatable"])}}))')
  "$@" patch node "$name" --subresource=status --type=merge -p "$extended" >/dev/null
}

# ---------------------------------------------------------------- down

cmd_start_node() {
  local state=$1 i=$2 dir=$1/node-$2
  [[ -d $dir ]] || die "no node $i in $state"
  K8S_BIN=$("$HACK/cluster.sh" bin-dir)
  [[ -f $dir/containerd.pid ]] || start_containerd "$dir" "$i"
  [[ -f $dir/kubelet.pid ]] || start_kubelet "$dir" "$i"
}

cmd_stop_node() {
  local state=$1 i=$2 dir=$1/node-$2
  [[ -d $dir ]] || die "no node $i in $state"
  stop_pidfile "$dir/kubelet.pid"
  stop_pidfile "$dir/containerd.pid"
}

# kill_cgroup NAME: end every process left in the node's cgroups (containers whose shim is gone).
kill_cgroup() {
  local name=$1 dir pids n
  for ((n = 0; n < 50; n++)); do
    pids=$(find /sys/fs/cgroup/*/"$name" -name cgroup.procs -exec cat {} + 2>/dev/null | sort -u || true)
    [[ -z $pids ]] && break
    # shellcheck disable=SC2086 # one pid per word
    kill -9 $pids 2>/dev/null || true
    sleep 0.1
  done
  for dir in /sys/fs/cgroup/*/"$name"; do
    [[ -d $dir ]] && find "$dir" -depth -type d -exec rmdir {} + 2>/dev/null || true
  done
}

cmd_down() {
  local state=$1 i count dir
  [[ -d $state ]] || return 0
  count=$(cat "$state/count" 2>/dev/null || echo 0)
  for ((i = 0; i < count; i++)); do
    dir=$state/node-$i
    [[ -d $dir ]] || continue
    stop_pidfile "$dir/kubelet.pid"
    # Containers first, while their runtime still answers; then the runtime and what is left in the
    # node's cgroups (shims, and containers whose shim is gone).
    if [[ -f $dir/containerd.pid ]]; then
      local task
      for task in $(ctr_of "$dir" -n k8s.io tasks ls -q 2>/dev/null); do
        ctr_of "$dir" -n k8s.io tasks kill -s SIGKILL "$task" >/dev/null 2>&1 || true
      done
    fi
    stop_pidfile "$dir/containerd.pid"
    pkill -9 -f -- "-address $dir/containerd.sock" 2>/dev/null || true
    kill_cgroup "$CGROUP_PREFIX-$i"
    stop_pidfile "$dir/forward-node.pid"
    stop_pidfile "$dir/forward-host.pid"
  done
  stop_pidfile "$state/coredns/pid"
  # Mounts under the state dir (overlay snapshots, pod volumes, netns of pods), deepest first.
  local mnt
  for _ in 1 2 3; do
    awk -v p="$state/" 'index($2, p) == 1 {print $2}' /proc/mounts | sort -r | while read -r mnt; do
      umount "$mnt" 2>/dev/null || umount -l "$mnt" 2>/dev/null || true
    done
  done
  for ((i = 0; i < count; i++)); do
    ip netns del "$(netns_of "$i")" 2>/dev/null || true
    ip route del "$POD_NET.$i.0/24" 2>/dev/null || true
  done
  if [[ -f $state/bridge ]]; then
    local range
    for range in "${GUARDED[@]}"; do
      ip route del unreachable "$range" 2>/dev/null || true
    done
    ip link del "$BRIDGE" 2>/dev/null || true
  fi
  # Links the kubelet made into the cluster's directory, then the host paths that only `up` brought.
  find /var/log/containers -maxdepth 1 -type l -lname "$state/*" -delete 2>/dev/null || true
  if [[ -f $state/host-paths-created ]]; then
    local path
    while read -r path; do
      [[ -n $path ]] || continue
      # `ip netns` makes /run/netns a mount point of its own.
      ! mountpoint -q "$path" || umount "$path" 2>/dev/null || umount -l "$path" || true
      rm -rf --one-file-system "$path"
    done <"$state/host-paths-created"
  fi
  if [[ -f $state/sysctls ]]; then
    local line
    while read -r line; do
      sysctl -qw "$line" || log "could not restore $line"
    done <"$state/sysctls"
  fi
  rm -rf "$state"
}

# ---------------------------------------------------------------- main

main() {
  local cmd=${1:-}
  (($#)) && shift
  case $cmd in
  build) cmd_build ;;
  up) cmd_up "$@" ;;
  down) cmd_down "$@" ;;
  stop-node) cmd_stop_node "$@" ;;
  start-node) cmd_start_node "$@" ;;
  ctr)
    local state=$1 i=$2
    shift 2
    ctr_of "$state/node-$i" "$@"
    ;;
  *)
    sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2
    exit 2
    ;;
  esac
}

main "$@"
