#!/usr/bin/env bash
# fairbench lab hosts: real systemd hosts on this machine, for the lab tests and the demo.
#
#   tests/lab/lab.sh up [N]    boot N (default 2) Debian bookworm hosts with `systemd-nspawn -b`
#   tests/lab/lab.sh down      stop them; no process, cgroup or mount is left behind
#   tests/lab/lab.sh status    one line per host; exit 0 only when every host answers SSH
#   tests/lab/lab.sh packages  the Debian packages of the tools `up` needs that this machine lacks (`up`
#                              installs them; CI installs them beside its own, with one apt-get update)
#   tests/lab/lab.sh ssh HOST [CMD...]   a root shell (or command) on lab host HOST (lab1, lab2, ...)
#
# Host i is "lab<i>": sshd on 127.0.0.1:(SSH_PORT_BASE+i), its LLM server on 127.0.0.1:(SERVICE_PORT_BASE+i).
# Every host shares this machine's network (no --network-*), so each gets its own ports and traffic
# stays on loopback. `up` (re)writes inventory/lab.yml with those hosts in the group gpu_hosts.
#
# Settings (environment):
#   FAIRBENCH_LAB_CACHE              base root filesystems and the shared directory, kept across labs
#                                    (/var/cache/fairbench-lab)
#   FAIRBENCH_LAB_DIR                the running lab: host overlays, SSH keys  (/var/lib/fairbench-lab)
#   FAIRBENCH_LAB_SSH_PORT_BASE      lab<i> sshd listens on BASE+i             (2220)
#   FAIRBENCH_LAB_SERVICE_PORT_BASE  lab<i> serving_port is BASE+i             (30000)
#   FAIRBENCH_LAB_DIST_PORT_BASE     lab<i> serving_dist_init_port is BASE+i   (31000)
#   FAIRBENCH_LAB_WORKER_PORT_BASE   lab<i> serving_worker_port is BASE+100i   (30000)
#   FAIRBENCH_LAB_BOOTSTRAP_PORT_BASE lab<i> serving_bootstrap_port is BASE+100i (32000)
#   FAIRBENCH_LAB_ROUTER_METRICS_PORT_BASE lab<i> serving_router_metrics_port is BASE+i (29000)
#   FAIRBENCH_LAB_MIRROR             Debian mirror URI; default: read from this machine's apt sources
#   FAIRBENCH_LAB_INVENTORY          where `up` writes the inventory           (<repo>/inventory/lab.yml)
#   FAIRBENCH_LAB_BOOT_TIMEOUT       seconds to wait for each host's SSH       (90)
#
# Needs root (debootstrap, nspawn, cgroups, mounts). Tested on a hybrid cgroup layout (v1 controllers,
# name=systemd v1 and cgroup2 at /sys/fs/cgroup/unified) without systemd as PID 1; a pure cgroup2 layout is
# handled too but has not been tried.
set -euo pipefail
shopt -s nullglob

readonly RELEASE=bookworm
# What every lab host has. Beyond what boots it and lets Ansible reach it (systemd, dbus, sshd, python3 +
# venv) these are what Ansible's builtin modules expect on a target: python3-apt (apt, apt_repository),
# python3-pip/setuptools (pip), acl (become_user to an unprivileged user), sudo (become); plus procps,
# iproute2 and curl for debugging.
readonly PACKAGES=(
    systemd systemd-sysv dbus openssh-server sudo ca-certificates
    python3 python3-venv python3-apt python3-pip python3-setuptools
    acl procps iproute2 curl less
)
# Bump when the base tweaks below change, so a cached base from an older script is not reused.
readonly BASE_REVISION=2

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
readonly REPO
readonly CACHE=${FAIRBENCH_LAB_CACHE:-/var/cache/fairbench-lab}
readonly STATE=${FAIRBENCH_LAB_DIR:-/var/lib/fairbench-lab}
readonly SSH_PORT_BASE=${FAIRBENCH_LAB_SSH_PORT_BASE:-2220}
readonly SERVICE_PORT_BASE=${FAIRBENCH_LAB_SERVICE_PORT_BASE:-30000}
readonly DIST_PORT_BASE=${FAIRBENCH_LAB_DIST_PORT_BASE:-31000}
readonly WORKER_PORT_BASE=${FAIRBENCH_LAB_WORKER_PORT_BASE:-30000}
readonly BOOTSTRAP_PORT_BASE=${FAIRBENCH_LAB_BOOTSTRAP_PORT_BASE:-32000}
readonly ROUTER_METRICS_PORT_BASE=${FAIRBENCH_LAB_ROUTER_METRICS_PORT_BASE:-29000}
readonly INVENTORY=${FAIRBENCH_LAB_INVENTORY:-$REPO/inventory/lab.yml}
readonly BOOT_TIMEOUT=${FAIRBENCH_LAB_BOOT_TIMEOUT:-90}
# Every host sees this directory of this machine read-only at the same path, as a fleet shares an NFS export:
# the SGLang wheelhouse, built here once, is installed from it on every host without being copied.
readonly SHARED=$CACHE/shared
readonly KEY=$STATE/ssh/id_ed25519
readonly KNOWN_HOSTS=$STATE/ssh/known_hosts
# Name of each lab's cgroup directory in every hierarchy we manage (see cgroup_roots).
readonly CGROUP_NAME=fairbench-lab

log() { printf 'lab: %s\n' "$*"; }
die() {
    printf 'lab: error: %s\n' "$*" >&2
    exit 1
}

# Seconds since the epoch with a decimal part, for the timings printed at the end of up/down.
now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

need_root() {
    [[ $EUID -eq 0 ]] || die "must run as root (debootstrap, systemd-nspawn, cgroups and mounts need it)"
}

# The Debian packages of the host-side tools that this machine lacks, one per line.
missing_packages() {
    local cmd
    for cmd in debootstrap:debootstrap systemd-nspawn:systemd-container ssh:openssh-client \
        ssh-keygen:openssh-client flock:util-linux unshare:util-linux ss:iproute2; do
        command -v "${cmd%%:*}" >/dev/null || printf '%s\n' "${cmd#*:}"
    done | sort -u
}

# Installs the host-side tools with apt when one is missing (CI starts from a bare Debian).
ensure_tools() {
    local missing=()
    mapfile -t missing < <(missing_packages)
    ((${#missing[@]})) || return 0
    command -v apt-get >/dev/null || die "missing ${missing[*]} and no apt-get to install them"
    log "installing host tools: ${missing[*]}"
    local out
    out=$(mktemp)
    if ! { DEBIAN_FRONTEND=noninteractive apt-get update -qq &&
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"; } \
        >"$out" 2>&1; then
        tail -n 20 "$out" >&2
        rm -f "$out"
        die "could not install ${missing[*]} with apt-get (output above)"
    fi
    rm -f "$out"
}

# One lock for up/down/status, so two commands never race on the same lab.
take_lock() {
    mkdir -p "$STATE"
    exec {LOCK_FD}>"$STATE.lock"
    flock -n "$LOCK_FD" || die "another lab.sh command is running (lock $STATE.lock)"
}

# --- the Debian mirror ------------------------------------------------------------------------------------

# Prints the URIs of this machine's apt sources, one "URI SUITE" per line, deb822 files first. The lab must use
# the mirror the machine is configured with (a CI machine may only reach its own), never one named here.
apt_source_uris() {
    local f
    for f in /etc/apt/sources.list.d/*.sources; do
        # deb822: blank-line separated stanzas; print each URI with each suite of a "Types: deb" stanza.
        awk '
            function flush() {
                if (types ~ /(^| )deb( |$)/ && enabled != "no")
                    for (i = 1; i <= nu; i++) for (j = 1; j <= ns; j++) print u[i], s[j]
                types = ""; enabled = ""; nu = 0; ns = 0
            }
            /^[ \t]*#/ { next }
            /^[ \t]*$/ { flush(); next }
            { key = tolower($1); sub(/:$/, "", key); $1 = "" }
            key == "types" { types = $0 }
            key == "enabled" { enabled = tolower($2) }
            key == "uris" { nu = split($0, u, " ") }
            key == "suites" { ns = split($0, s, " ") }
            END { flush() }
        ' "$f"
    done
    for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
        [[ -f $f ]] || continue
        # One-line format: deb [options] URI SUITE COMPONENTS...
        awk '$1 == "deb" { i = 2; if ($2 ~ /^\[/) while ($i !~ /\]$/) i++; if ($2 ~ /^\[/) i++;
                           print $i, $(i + 1) }' "$f"
    done
}

# The archive URI: from a suite that is a release name (no "-security"/"-updates" suffix).
debian_mirror() {
    if [[ -n ${FAIRBENCH_LAB_MIRROR:-} ]]; then
        printf '%s\n' "$FAIRBENCH_LAB_MIRROR"
        return
    fi
    local uri
    uri=$(apt_source_uris | awk '$2 !~ /[-\/]/ { print $1; exit }')
    [[ -n $uri ]] || die "no Debian archive found in /etc/apt/sources.list.d/*.sources or /etc/apt/sources.list;" \
        "set FAIRBENCH_LAB_MIRROR to a Debian mirror URI"
    printf '%s\n' "${uri%/}"
}

# The security archive URI, if the machine has one configured (empty otherwise).
debian_security_mirror() {
    apt_source_uris | awk '$2 ~ /-security$|\/updates$/ { print $1; exit }' | sed 's:/*$::'
}

# --- the base root filesystem (debootstrap, cached) -------------------------------------------------------

base_dir() {
    local key
    key=$(printf '%s\n' "$RELEASE" "$BASE_REVISION" "${PACKAGES[@]}" | sha256sum | cut -c1-12)
    printf '%s/%s-%s\n' "$CACHE" "$RELEASE" "$key"
}

# Builds the base once: debootstrap into a temporary directory, adjust it, then rename it into place so an
# interrupted build never leaves a half-made base that a later `up` would trust.
ensure_base() {
    local base tmp mirror security start
    base=$(base_dir)
    if [[ -f $base/.complete ]]; then
        log "base root filesystem: $base (cached)"
        return
    fi
    mirror=$(debian_mirror)
    security=$(debian_security_mirror)
    start=$(now)
    log "building the base root filesystem with debootstrap from $mirror (once; about a minute)"
    mkdir -p "$CACHE"
    tmp=$(mktemp -d "$CACHE/.build.XXXXXX")
    # A failed build leaves nothing half-made behind.
    trap 'rm -rf --one-file-system "$tmp"' EXIT
    local pkgs
    pkgs=$(
        IFS=,
        printf '%s' "${PACKAGES[*]}"
    )
    if ! debootstrap --variant=minbase --components=main --include="$pkgs" \
        "$RELEASE" "$tmp/rootfs" "$mirror" >"$tmp/debootstrap.log" 2>&1; then
        tail -n 20 "$tmp/debootstrap.log" >&2
        die "debootstrap failed (log above; the mirror came from this machine's apt sources: $mirror)"
    fi
    adjust_base "$tmp/rootfs" "$mirror" "$security"
    printf 'release=%s\nmirror=%s\nbuilt=%s\n' "$RELEASE" "$mirror" "$(date -Is)" >"$tmp/rootfs/.complete"
    # Bases of older package lists or revisions are unused from now on (up runs only when no lab is up).
    local old
    for old in "$CACHE/$RELEASE"-*; do
        [[ $old == "$base" ]] || rm -rf --one-file-system "$old"
    done
    rm -rf --one-file-system "$base"
    mv "$tmp/rootfs" "$base"
    rm -rf "$tmp"
    trap - EXIT
    log "base root filesystem built in $(elapsed "$start") s: $base ($(du -sm "$base" | cut -f1) MB)"
}

# What every host shares; what differs per host (keys, ports, names) goes into each host's overlay.
adjust_base() {
    local root=$1 mirror=$2 security=$3
    # Per-host identity must not be baked in: debootstrap's openssh-server made host keys and systemd a
    # machine-id. An empty machine-id makes systemd use a fresh one per boot (nspawn passes a random UUID).
    rm -f "$root"/etc/ssh/ssh_host_*
    : >"$root/etc/machine-id"
    rm -f "$root/var/lib/dbus/machine-id" "$root/etc/hostname"
    # apt inside the hosts uses the same mirror as this machine.
    rm -f "$root/etc/apt/sources.list"
    {
        printf 'Types: deb\nURIs: %s\nSuites: %s %s-updates\nComponents: main\n' "$mirror" "$RELEASE" "$RELEASE"
        printf 'Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n'
        if [[ -n $security ]]; then
            printf '\nTypes: deb\nURIs: %s\nSuites: %s-security\nComponents: main\n' "$security" "$RELEASE"
            printf 'Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n'
        fi
    } >"$root/etc/apt/sources.list.d/debian.sources"
    # Timers that would start apt or disk maintenance in the middle of a test run (apt-daily holds the dpkg
    # lock); and gettys nobody logs in on (saves memory per host).
    local unit
    for unit in apt-daily.timer apt-daily-upgrade.timer e2scrub_all.timer e2scrub_reap.service fstrim.timer \
        console-getty.service getty@.service; do
        ln -sf /dev/null "$root/etc/systemd/system/$unit"
    done
    # sshd: key authentication only, no DNS lookups (slow on loopback), only the ed25519 host key each host
    # gets at `up`. The port and address are per host (fairbench-lab-host.conf).
    cat >"$root/etc/ssh/sshd_config.d/fairbench-lab.conf" <<'EOF'
# fairbench lab host: root logs in with the lab key only.
HostKey /etc/ssh/ssh_host_ed25519_key
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UseDNS no
EOF
    install -d -m 700 "$root/root/.ssh"
    # minbase has no locale configuration; pam_env complains at every SSH login without this file.
    printf 'LANG=C.UTF-8\n' >"$root/etc/default/locale"
    # Journal in memory: the hosts live for one test run.
    mkdir -p "$root/etc/systemd/journald.conf.d"
    printf '[Journal]\nStorage=volatile\nRuntimeMaxUse=32M\n' \
        >"$root/etc/systemd/journald.conf.d/fairbench-lab.conf"
    rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
}

# --- cgroups ----------------------------------------------------------------------------------------------

# The hierarchies in which each nspawn gets its own cgroup: name=systemd (v1) and the unified (v2) one on a
# hybrid layout, or the single cgroup2 tree. With --keep-unit and no machined, nspawn runs the container in
# <its own cgroup>/payload; started from the same cgroup, every host's systemd would manage the same
# directories: lab1's x.service and lab2's x.service would be one cgroup, whose accounting mixes both hosts,
# which outlives a stop in one of them, and which a cgroup-wide kill (`systemctl stop` escalating to SIGKILL
# through cgroup.kill) empties in both. (Sharing one, a stop in one host is known to kill the other's
# services; with systemd 252 on kernel 6.18 the PID namespace hid the other host's processes, but the cgroup
# was shared all the same, which tests/lab/test_lab_hosts.py checks.)
cgroup_roots() {
    if [[ $(stat -fc %T /sys/fs/cgroup) == cgroup2fs ]]; then
        echo /sys/fs/cgroup
        return
    fi
    [[ -d /sys/fs/cgroup/systemd ]] && echo /sys/fs/cgroup/systemd
    [[ $(stat -fc %T /sys/fs/cgroup/unified 2>/dev/null) == cgroup2fs ]] && echo /sys/fs/cgroup/unified
    return 0
}

# Process ids in a cgroup and all its descendants.
cgroup_pids() {
    local dir=$1
    [[ -d $dir ]] || return 0
    find "$dir" -name cgroup.procs -exec cat {} + 2>/dev/null | sort -un
}

# Removes a cgroup tree depth-first (a cgroup can only be removed once it has no children and no processes).
remove_cgroup() {
    local dir=$1
    [[ -d $dir ]] || return 0
    find "$dir" -depth -type d -exec rmdir {} + 2>/dev/null || true
    [[ ! -d $dir ]]
}

# --- hosts ------------------------------------------------------------------------------------------------

host_dir() { printf '%s/hosts/%s\n' "$STATE" "$1"; }
ssh_port() { echo $((SSH_PORT_BASE + ${1#lab})); }
service_port() { echo $((SERVICE_PORT_BASE + ${1#lab})); }
# Where lab<i> listens for the other ranks of a server over several hosts it is rank 0 of.
dist_port() { echo $((DIST_PORT_BASE + ${1#lab})); }
# Where lab<i>'s disaggregated configs put their prefill and decode servers (a hundred ports each), their
# prefill servers' KV bootstrap, and their router's metrics.
worker_port() { echo $((WORKER_PORT_BASE + 100 * ${1#lab})); }
bootstrap_port() { echo $((BOOTSTRAP_PORT_BASE + 100 * ${1#lab})); }
router_metrics_port() { echo $((ROUTER_METRICS_PORT_BASE + ${1#lab})); }

# Names of the hosts of the current (or stale) lab, from the state directory.
lab_hosts() {
    local d
    for d in "$STATE"/hosts/lab*; do basename "$d"; done | sort -V
}

# The nspawn process of a host if it is alive (its pid file, checked against /proc so a recycled pid does not
# count).
host_pid() {
    local pidfile pid
    pidfile=$(host_dir "$1")/pid
    [[ -f $pidfile ]] || return 1
    pid=$(<"$pidfile")
    [[ -n $pid && -r /proc/$pid/cmdline ]] || return 1
    tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q "systemd-nspawn .*--machine=$1 " || return 1
    printf '%s\n' "$pid"
}

# Extra ssh options (cmd_ssh adds -t for an interactive shell).
SSH_EXTRA=()

lab_ssh() {
    local host=$1
    shift
    ssh "${SSH_EXTRA[@]}" -F /dev/null -i "$KEY" -p "$(ssh_port "$host")" \
        -o BatchMode=yes -o IdentitiesOnly=yes -o ConnectTimeout=3 -o LogLevel=ERROR \
        -o UserKnownHostsFile="$KNOWN_HOSTS" -o StrictHostKeyChecking=yes \
        root@127.0.0.1 "$@"
}

port_in_use() {
    ss -Hltn "sport = :$1" 2>/dev/null | grep -q .
}

# Per host: an overlay upper directory holding only what differs from the base (identity, ports, key).
prepare_host() {
    local host=$1 dir upper port
    dir=$(host_dir "$host")
    upper=$dir/upper
    port=$(ssh_port "$host")
    rm -rf "$dir"
    mkdir -p "$upper/etc/ssh/sshd_config.d" "$upper/root/.ssh" "$dir/work" "$dir/root"
    chmod 700 "$upper/root/.ssh"
    ssh-keygen -q -t ed25519 -N '' -C "root@$host" -f "$upper/etc/ssh/ssh_host_ed25519_key"
    printf '[127.0.0.1]:%s %s\n' "$port" "$(cut -d' ' -f1,2 "$upper/etc/ssh/ssh_host_ed25519_key.pub")" \
        >>"$KNOWN_HOSTS"
    printf 'Port %s\nListenAddress 127.0.0.1\n' "$port" >"$upper/etc/ssh/sshd_config.d/fairbench-lab-host.conf"
    install -m 600 "$KEY.pub" "$upper/root/.ssh/authorized_keys"
    printf '%s\n' "$host" >"$upper/etc/hostname"
    printf '127.0.0.1\tlocalhost\n127.0.1.1\t%s\n::1\t\tlocalhost ip6-localhost ip6-loopback\n' "$host" \
        >"$upper/etc/hosts"
    share_machine_trust "$upper"
    # Tests check this marker before doing anything destructive, so a wrong inventory cannot point them at a
    # real machine.
    printf 'host=%s\nssh_port=%s\nserving_port=%s\n' "$host" "$port" "$(service_port "$host")" \
        >"$upper/etc/fairbench-lab"
}

# The hosts reach the network through this machine, so they get its trust and pip settings: the local CA
# certificates (a TLS-inspecting proxy's CA, a company CA) and the machine-wide pip configuration (an index,
# the CA bundle to use). Copied at every `up`, not baked into the cached base, so they follow the machine.
share_machine_trust() {
    local upper=$1
    if [[ -n $(find /usr/local/share/ca-certificates -name '*.crt' 2>/dev/null) ]]; then
        mkdir -p "$upper/usr/local/share/ca-certificates" "$upper/etc/ssl/certs"
        cp -a /usr/local/share/ca-certificates/. "$upper/usr/local/share/ca-certificates/"
        # The bundle update-ca-certificates would build from the same certificates, without running it.
        cp /etc/ssl/certs/ca-certificates.crt "$upper/etc/ssl/certs/ca-certificates.crt"
    fi
    if [[ -f /etc/pip.conf ]]; then
        cp /etc/pip.conf "$upper/etc/pip.conf"
    fi
    if [[ -d /etc/xdg/pip ]]; then
        mkdir -p "$upper/etc/xdg"
        cp -a /etc/xdg/pip "$upper/etc/xdg/"
    fi
}

# Boots one host in the background. The subshell first moves itself into the host's own cgroup in every
# hierarchy, then becomes (exec, same pid) a new session, a private mount namespace holding the overlay root,
# and finally systemd-nspawn. The overlay mount exists only in that namespace, so it vanishes with nspawn and
# can never be left mounted on this machine.
start_host() {
    local host=$1 base=$2 dir cg
    dir=$(host_dir "$host")
    while read -r cg; do
        mkdir -p "$cg/$CGROUP_NAME/$host"
    done < <(cgroup_roots)
    (
        # The lab lock is for lab.sh commands, not for the hosts: a host holding it would block `down`.
        exec {LOCK_FD}>&-
        while read -r cg; do
            echo "$BASHPID" >"$cg/$CGROUP_NAME/$host/cgroup.procs"
        done < <(cgroup_roots)
        # --register=no --keep-unit: there is no machined (nor systemd as PID 1) to register with; nspawn stays
        # in the cgroup made above. No --network-*: the host's network, with per-host ports.
        # --console=read-only: boot messages go to the log file, nothing reads input.
        # --bind-ro: the shared directory (SHARED), read-only.
        # --rlimit: a container cannot raise its own hard limits, so give it those of a systemd host
        # (1024:524288 open files); otherwise a unit's LimitNOFILE=65536 is silently cut to this shell's limit.
        # Where root lacks CAP_SYS_RESOURCE (some sandboxes) nspawn cannot either: see note_nofile_limit.
        # shellcheck disable=SC2016 # $1..$3 are expanded by the inner sh
        exec setsid unshare --mount --propagation private -- sh -c '
            mount -t overlay overlay -o "lowerdir=$1,upperdir=$2/upper,workdir=$2/work" "$2/root" || exit 1
            stat -c %d:%i "$2/root" >"$2/root-inode"
            exec systemd-nspawn --boot --directory="$2/root" --machine="$3" --register=no --keep-unit \
                --console=read-only --link-journal=no --resolv-conf=copy-host --timezone=off \
                --rlimit=RLIMIT_NOFILE=1024:524288 --bind-ro="$4:$4"
        ' fairbench-lab "$base" "$dir" "$host" "$SHARED"
    ) </dev/null >"$dir/console.log" 2>&1 &
    echo "$!" >"$dir/pid"
}

# nspawn's --rlimit quietly does nothing where this machine cannot raise its own hard limit; say so once,
# because a unit's LimitNOFILE is then capped at that limit inside the hosts.
note_nofile_limit() {
    local hard
    hard=$(ulimit -Hn)
    if [[ $hard != unlimited ]] && ((hard < 524288)) && ! (ulimit -Hn 524288) 2>/dev/null; then
        log "note: open files are capped at $hard in the hosts (this machine cannot raise its hard limit)"
    fi
}

# Whether a process exists and is not a zombie.
pid_alive() {
    [[ -r /proc/$1/stat ]] && [[ $(awk '{ print $3 }' "/proc/$1/stat" 2>/dev/null) != Z ]]
}

# Waits until a host answers SSH and its systemd has finished booting.
wait_host() {
    local host=$1 start deadline state
    start=$(now)
    deadline=$((SECONDS + BOOT_TIMEOUT))
    until lab_ssh "$host" true </dev/null 2>/dev/null; do
        # The pid file's process, not host_pid: until it has exec'd nspawn it is still the starting shell.
        if ! pid_alive "$(<"$(host_dir "$host")/pid")"; then
            tail -n 30 "$(host_dir "$host")/console.log" >&2 || true
            die "$host: systemd-nspawn exited during boot (console log above: $(host_dir "$host")/console.log)"
        fi
        ((SECONDS < deadline)) || die "$host: no SSH on 127.0.0.1:$(ssh_port "$host") after ${BOOT_TIMEOUT}s" \
            "(console log: $(host_dir "$host")/console.log)"
        sleep 0.2
    done
    # "degraded" (some unit failed) still boots a usable host; report it so it is not a surprise later.
    state=$(lab_ssh "$host" timeout 60 systemctl is-system-running --wait </dev/null 2>/dev/null) || true
    log "$host: SSH on 127.0.0.1:$(ssh_port "$host") after $(elapsed "$start") s, systemd ${state:-unknown}"
    if [[ $state != running ]]; then
        lab_ssh "$host" systemctl --failed --no-legend --plain </dev/null 2>/dev/null |
            sed "s/^/lab: $host: failed unit: /"
    fi
}

write_inventory() {
    local host
    mkdir -p "$(dirname "$INVENTORY")"
    {
        echo "# Written by tests/lab/lab.sh up: the systemd-nspawn lab hosts on this machine (make lab-up)."
        echo "# Each host has its own sshd port and serving ports on 127.0.0.1 (they share this machine's"
        echo "# network)."
        echo "all:"
        echo "  children:"
        echo "    gpu_hosts:"
        echo "      hosts:"
        for host in "$@"; do
            echo "        $host:"
            echo "          ansible_port: $(ssh_port "$host")"
            echo "          serving_port: $(service_port "$host")"
            echo "          serving_dist_init_port: $(dist_port "$host")"
            echo "          serving_worker_port: $(worker_port "$host")"
            echo "          serving_bootstrap_port: $(bootstrap_port "$host")"
            echo "          serving_router_metrics_port: $(router_metrics_port "$host")"
        done
        echo "      vars:"
        echo "        ansible_host: 127.0.0.1"
        echo "        ansible_user: root"
        echo "        ansible_python_interpreter: /usr/bin/python3"
        echo "        ansible_ssh_private_key_file: $KEY"
        # Host keys are made fresh at every `up` and recorded in the lab's own known_hosts, so checking stays
        # strict without touching ~/.ssh/known_hosts (where [127.0.0.1]:2221 would change at every up).
        echo "        ansible_ssh_common_args: >-"
        echo "          -o UserKnownHostsFile=$KNOWN_HOSTS -o StrictHostKeyChecking=yes -o IdentitiesOnly=yes"
        # Real SGLang (make demo-sglang, with sglang_on_cpu): the hosts' own Python 3.11, which is this
        # machine's too, so the wheelhouse built here once (in SHARED) serves both hosts; no PyTorch index
        # (only PyPI is reachable); the tiny model that tests/support/tiny_model.py builds, where the
        # campaign expects it.
        echo "        sglang_python: /usr/bin/python3"
        echo "        sglang_uv_python_downloads: never"
        echo "        sglang_torch_index_url: ''"
        echo "        sglang_wheelhouse: $SHARED/sglang-wheelhouse"
        echo "        sglang_wheelhouse_build: true"
        echo "        sglang_wheelhouse_shared: true"
        echo "        serving_model_dirs:"
        echo "          /var/cache/fairbench-serving/models/tiny-gpt2: \"{{ inventory_dir }}/../build/tiny-gpt2\""
    } >"$INVENTORY.tmp"
    mv "$INVENTORY.tmp" "$INVENTORY"
}

# Proportional set size of every process of a host, in MB: its share of this machine's memory.
host_pss_mb() {
    local cg pid total=0 kb
    cg=$(cgroup_roots | tail -n 1)/$CGROUP_NAME/$1
    for pid in $(cgroup_pids "$cg"); do
        kb=$(awk '/^Pss:/ { print $2 }' "/proc/$pid/smaps_rollup" 2>/dev/null) || continue
        total=$((total + ${kb:-0}))
    done
    echo $((total / 1024))
}

# --- commands ---------------------------------------------------------------------------------------------

cmd_up() {
    local n=${1:-2} start base host i hosts=() running=()
    [[ $n =~ ^[1-9][0-9]*$ ]] || die "up: N must be a positive number of hosts, not '$n'"
    start=$(now)
    ensure_tools
    take_lock
    for host in $(lab_hosts); do
        host_pid "$host" >/dev/null && running+=("$host")
    done
    if ((${#running[@]})); then
        if ((${#running[@]} == n)) && [[ $(lab_hosts | wc -l) -eq $n ]]; then
            log "already up: ${running[*]} (nothing to do; 'lab.sh down' first to rebuild)"
            write_inventory "${running[@]}"
            return 0
        fi
        die "a lab with $(lab_hosts | wc -l) host(s) is up (${running[*]} running); run 'lab.sh down' first"
    fi
    # Leftovers of a lab whose processes are gone (a reboot, a killed run): clear them first.
    teardown quiet
    for ((i = 1; i <= n; i++)); do hosts+=("lab$i"); done
    for host in "${hosts[@]}"; do
        port_in_use "$(ssh_port "$host")" && die "port $(ssh_port "$host") (for $host's sshd) is already in use" \
            "on this machine; set FAIRBENCH_LAB_SSH_PORT_BASE"
        port_in_use "$(service_port "$host")" && die "port $(service_port "$host") ($host's serving_port) is" \
            "already in use on this machine; set FAIRBENCH_LAB_SERVICE_PORT_BASE"
    done
    [[ -n $(cgroup_roots) ]] || die "no name=systemd or cgroup2 hierarchy under /sys/fs/cgroup"
    ensure_base
    base=$(base_dir)
    mkdir -p "$STATE/ssh" "$SHARED"
    chmod 700 "$STATE/ssh"
    # One key pair per lab: made at up, removed at down.
    ssh-keygen -q -t ed25519 -N '' -C fairbench-lab -f "$KEY"
    : >"$KNOWN_HOSTS"
    # A failed boot leaves the hosts as they are, for their console logs; say how to clear them.
    trap 'log "up failed: hosts left for inspection ($STATE/hosts/*/console.log); lab.sh down removes them"' EXIT
    for host in "${hosts[@]}"; do
        prepare_host "$host"
        start_host "$host" "$base"
        log "$host: booting (sshd 127.0.0.1:$(ssh_port "$host"), serving_port $(service_port "$host"))"
    done
    for host in "${hosts[@]}"; do wait_host "$host"; done
    note_nofile_limit
    trap - EXIT
    write_inventory "${hosts[@]}"
    log "inventory: $INVENTORY (group gpu_hosts)"
    for host in "${hosts[@]}"; do log "$host: $(host_pss_mb "$host") MB memory (PSS)"; done
    log "up: ${#hosts[@]} host(s) in $(elapsed "$start") s"
}

# Stops every host and removes what the lab made: processes, cgroups, overlays, keys. Safe to run twice.
teardown() {
    local quiet=${1:-} host pid cg pids deadline
    local hosts nspawn_pids=()
    mapfile -t hosts < <(lab_hosts)
    # Orderly first: SIGTERM makes nspawn ask the container's systemd to shut down (its --kill-signal).
    for host in "${hosts[@]}"; do
        if pid=$(host_pid "$host"); then
            [[ -n $quiet ]] || log "$host: shutting down"
            kill -TERM "$pid" 2>/dev/null || true
            nspawn_pids+=("$pid")
        fi
    done
    # A container's systemd ignores the signal until it has installed its handlers (PID 1 of a PID namespace
    # gets no default actions), so a host stopped in its first moments of boot needs it again: repeat it.
    deadline=$((SECONDS + 30))
    local next=$((SECONDS + 2))
    for pid in "${nspawn_pids[@]}"; do
        while pid_alive "$pid" && ((SECONDS < deadline)); do
            if ((SECONDS >= next)); then
                kill -TERM "${nspawn_pids[@]}" 2>/dev/null || true
                next=$((SECONDS + 2))
            fi
            sleep 0.2
        done
    done
    # Then anything still in a lab cgroup (a host that did not shut down in time, a stray process) is killed.
    while read -r cg; do
        pids=$(cgroup_pids "$cg/$CGROUP_NAME")
        if [[ -n $pids ]]; then
            log "killing $(wc -w <<<"$pids") process(es) left in $cg/$CGROUP_NAME"
            # shellcheck disable=SC2086 # one pid per word
            kill -KILL $pids 2>/dev/null || true
        fi
    done < <(cgroup_roots)
    deadline=$((SECONDS + 10))
    while read -r cg; do
        until remove_cgroup "$cg/$CGROUP_NAME"; do
            ((SECONDS < deadline)) || die "could not remove cgroup $cg/$CGROUP_NAME" \
                "(processes still in it: $(cgroup_pids "$cg/$CGROUP_NAME" | xargs))"
            sleep 0.2
        done
    done < <(cgroup_roots)
    # nspawn was started by a shell that has exited, so PID 1 reaps it; wait a little so that no zombie is
    # left either when `down` returns (PID 1 is not ours to hurry).
    deadline=$((SECONDS + 10))
    for pid in "${nspawn_pids[@]}"; do
        while [[ -e /proc/$pid ]] && ((SECONDS < deadline)); do sleep 0.2; done
    done
    # The overlays were mounted only inside each nspawn's private mount namespace; check none leaked anyway.
    if grep -q " $STATE/" /proc/self/mountinfo; then
        die "mounts under $STATE remain: $(grep " $STATE/" /proc/self/mountinfo | cut -d' ' -f5 | xargs)"
    fi
    # nspawn's own bookkeeping: it removes its lock file (named after the root directory's device and inode)
    # and its mount propagation directory when it exits, but not when it was killed.
    for host in "${hosts[@]}"; do
        [[ -f $STATE/hosts/$host/root-inode ]] &&
            rm -f "/run/systemd/nspawn/locks/inode-$(<"$STATE/hosts/$host/root-inode")"
        rm -rf --one-file-system "/run/systemd/nspawn/propagate/$host"
    done
    rm -rf --one-file-system "$STATE/hosts" "$STATE/ssh"
    rmdir /run/systemd/nspawn/locks /run/systemd/nspawn/propagate /run/systemd/nspawn 2>/dev/null || true
    rmdir "$STATE" 2>/dev/null || true
}

cmd_down() {
    local start n
    need_root
    start=$(now)
    take_lock
    n=$(lab_hosts | wc -l)
    teardown
    if ((n)); then
        log "down: $n host(s) stopped in $(elapsed "$start") s; no process, cgroup or mount left"
    else
        log "down: no lab was up (nothing left behind)"
    fi
}

cmd_status() {
    local host pid state all_up=0 hosts
    need_root
    mapfile -t hosts < <(lab_hosts)
    if ((${#hosts[@]} == 0)); then
        log "no lab is up ('lab.sh up' to start one)"
        return 3
    fi
    for host in "${hosts[@]}"; do
        if ! pid=$(host_pid "$host"); then
            log "$host: down (no systemd-nspawn process)"
            all_up=1
            continue
        fi
        if state=$(lab_ssh "$host" systemctl is-system-running </dev/null 2>/dev/null) || [[ -n $state ]]; then
            log "$host: up, pid $pid, ssh 127.0.0.1:$(ssh_port "$host"), serving_port $(service_port "$host")," \
                "systemd $state, $(host_pss_mb "$host") MB"
        else
            log "$host: running (pid $pid) but no SSH on 127.0.0.1:$(ssh_port "$host")"
            all_up=1
        fi
    done
    return "$all_up"
}

cmd_ssh() {
    local host=${1:-}
    [[ -n $host ]] || die "ssh: which host? (lab1, lab2, ...)"
    shift
    host_pid "$host" >/dev/null || die "ssh: $host is not running"
    (($#)) || SSH_EXTRA=(-t)
    lab_ssh "$host" "$@"
}

usage() {
    # The header comment of this file, up to the first command.
    sed -n '2,/^set /{/^set /d; s/^# \{0,1\}//; p}' "${BASH_SOURCE[0]}"
}

main() {
    local cmd=${1:-}
    (($#)) && shift
    case $cmd in
    up)
        need_root
        (($# <= 1)) || die "up takes at most one argument (the number of hosts)"
        cmd_up "$@"
        ;;
    down) cmd_down ;;
    status) cmd_status ;;
    packages) missing_packages ;;
    ssh) cmd_ssh "$@" ;;
    -h | --help | help) usage ;;
    *)
        usage >&2
        exit 2
        ;;
    esac
}

main "$@"
