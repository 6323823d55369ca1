# Functions the hack/ scripts share; source it after defining log and die.

# cached_build DIR BINARY STAMP BUILDER: print DIR, holding DIR/BINARY built for STAMP. Under DIR's lock, a
# binary built for the same STAMP (its .stamp file) is reused; else BUILDER runs with a fresh directory
# TMP under DIR, must leave BINARY in TMP (its output in TMP/build.log, dying on failure), and the binary
# then replaces the old one and STAMP is recorded.
cached_build() {
  local dir=$1 binary=$2 stamp=$3 builder=$4
  mkdir -p "$dir"
  {
    flock 9
    if [[ -x $dir/$binary && -f $dir/.stamp && $(cat "$dir/.stamp") == "$stamp" ]]; then
      log "$binary is cached in $dir"
    else
      local tmp start=$SECONDS
      tmp=$(mktemp -d "$dir/.build.XXXXXX")
      "$builder" "$tmp"
      mv -f "$tmp/$binary" "$dir/$binary"
      printf '%s\n' "$stamp" >"$dir/.stamp"
      rm -rf "$tmp"
      log "built in $((SECONDS - start))s"
    fi
  } 9>"$dir/.lock"
  echo "$dir"
}

stop_pidfile() { # FILE: TERM, then KILL after 10 s, the process the file names; the file is removed
  local file=$1 pid n
  [[ -f $file ]] || return 0
  pid=$(cat "$file")
  kill "$pid" 2>/dev/null || true
  for ((n = 0; n < 100; n++)); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  kill -9 "$pid" 2>/dev/null || true
  rm -f "$file"
}

# A controller that runs against a cluster of hack/cluster.sh (karpenter.sh, jobset.sh): each script sets
# ROOT and NAME, then defines its parse_opts as `controller_opts COMPONENT "$@"`; running reads STATE.

# controller_opts COMPONENT [--name NAME]: NAME (default $NAME), and its cluster's STATE
# (.cluster/NAME/COMPONENT) and KUBECONFIG_FILE
controller_opts() {
  local component=$1
  shift
  while (($#)); do
    case $1 in
    --name) NAME=${2:?}; shift ;;
    *) die "unknown argument $1 (see the header of $0)" ;;
    esac
    shift
  done
  STATE=$ROOT/.cluster/$NAME/$component
  KUBECONFIG_FILE=$ROOT/.cluster/$NAME/kubeconfig
}

free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

running() { [[ -f $STATE/pid ]] && kill -0 "$(cat "$STATE/pid")" 2>/dev/null; }
