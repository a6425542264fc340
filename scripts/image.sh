#!/usr/bin/env bash
# Build the headroom image from the repository's Dockerfile, and check it as the chart runs it.
#
#   bash scripts/image.sh build [--arch amd64|arm64]   # prints the image reference it built
#   bash scripts/image.sh check [--arch amd64|arm64]   # one line per container check
#        [--mutate hostPID|SYS_PTRACE|mount:NAME] [--whole-cgroupfs]   # must then fail
#   bash scripts/image.sh ci      # scripts/test.sh's tier: both of the above, both arches
#   bash scripts/image.sh base [--arch ...]   # only the base image (test.sh makes the
#                                             # other arch's beside the earlier tiers)
#
# No registry is needed: the Dockerfile's base (python:3.13-slim-trixie) is made locally
# with debootstrap from the Debian archive (Debian's own python3.13) for the host's
# architecture, and for the other one from that tree by swapping its architecture-dependent
# packages (swap_arch_tar; qemu-user-static's binfmt handler then runs only ldconfig, the
# build's `headroom --version` and the check). podman and buildah come from Debian.
# Cached under .cache/image/ (gitignored), keyed by what they are made from:
#   base-<suite>-<arch>.tar         the base's root filesystem (~2 min each to make)
#   wheels/<arch>/<key>/            every dependency's wheel for that architecture, fetched
#                                   on the host (native speed) with --only-binary=:all:, so
#                                   a dependency without a wheel for <arch> fails here, by
#                                   name; the build then installs with --no-index.
# Needs root (apt, podman, cgroups). HEADROOM_IMAGE_CACHE overrides the cache folder.
set -euo pipefail
SELF=$(realpath "${BASH_SOURCE[0]}")
cd "$(dirname "$SELF")/.."

SUITE=trixie
PYVER=3.13
CACHE=${HEADROOM_IMAGE_CACHE:-$PWD/.cache/image}
HOST_ARCH=$(dpkg --print-architecture)
VERSION=$(python3 -c 'import tomllib; print(tomllib.load(open("pyproject.toml", "rb"))["project"]["version"])')

die() { echo "image.sh: $*" >&2; exit 1; }
log() { echo "image.sh: $*" >&2; }

usage() { sed -n '2,7p' "$SELF" | sed 's/^# \{0,1\}//' >&2; exit 2; }

cmd=${1:-}; [[ -n $cmd ]] || usage; shift
ARCH=$HOST_ARCH
CHECK_ARGS=()  # check: passed on to scripts/image_check.py (--mutate X, --whole-cgroupfs)
while [[ $# -gt 0 ]]; do
    case $1 in
        --arch) ARCH=${2:?--arch needs amd64 or arm64}; shift 2 ;;
        --arch=*) ARCH=${1#--arch=}; shift ;;
        --mutate) CHECK_ARGS+=("$1" "${2:?--mutate needs what to remove}"); shift 2 ;;
        --whole-cgroupfs|--keep) CHECK_ARGS+=("$1"); shift ;;
        *) usage ;;
    esac
done
case $ARCH in amd64|arm64) ;; *) die "unknown --arch $ARCH (amd64 or arm64)" ;; esac

BASE_REF=localhost/python:$PYVER-slim-$SUITE-$ARCH
HOST_BASE_REF=localhost/python:$PYVER-slim-$SUITE-$HOST_ARCH
IMAGE_REF=localhost/headroom:$VERSION-$ARCH

ensure_tools() {
    local missing=0 cmd
    for cmd in podman buildah runc debootstrap iptables; do command -v "$cmd" >/dev/null || missing=1; done
    if [[ $ARCH != "$HOST_ARCH" && ! -e /usr/libexec/qemu-binfmt/aarch64-binfmt-P ]]; then
        missing=1
    fi
    command -v stress-ng >/dev/null || missing=1
    if [[ $missing == 1 ]]; then
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq
        apt-get install -y -qq --no-install-recommends podman buildah runc crun debootstrap \
            fuse-overlayfs uidmap netavark aardvark-dns conmon catatonit \
            iptables qemu-user-static binfmt-support stress-ng >/dev/null
    fi
    # Our own engine configuration (/etc/containers stays as it is): runc, since crun 1.8
    # refuses hybrid cgroup hierarchies ("cgroups in hybrid mode not supported"), and
    # rlimits within this host's hard limits (podman asks for 1048576 open files), and
    # netavark (Debian ships a CNI config without the CNI plugins).
    mkdir -p "$CACHE"
    local nofile; nofile=$(ulimit -Hn)
    cat > "$CACHE/containers.conf" <<EOF
[containers]
default_ulimits = ["nofile=$nofile:$nofile", "nproc=4096:4096"]
[engine]
runtime = "runc"
[network]
network_backend = "netavark"
EOF
    export CONTAINERS_CONF=$CACHE/containers.conf
    if [[ $ARCH != "$HOST_ARCH" ]]; then
        local qarch; qarch=$(debarch_to_qemu "$ARCH")
        if [[ ! -e /proc/sys/fs/binfmt_misc/register ]]; then
            mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc
        fi
        # The F flag (fix binary, Debian's default) lets the handler work inside containers.
        [[ -e /proc/sys/fs/binfmt_misc/qemu-$qarch ]] || update-binfmts --enable "qemu-$qarch"
        grep -q '^flags: .*F' "/proc/sys/fs/binfmt_misc/qemu-$qarch" \
            || die "binfmt handler qemu-$qarch lacks the F flag"
    fi
}

debarch_to_qemu() { case $1 in amd64) echo x86_64 ;; arm64) echo aarch64 ;; esac; }

# The stand-in for python:3.13-slim-trixie: Debian trixie minbase + Debian's python3 and pip.
# Like the official image: `python` on PATH, no docs, man pages or translations (the dpkg
# excludes of Debian's slim images, so apt-get in a derived image stays slim); unlike
# Debian's own python, no PEP 668 marker (pip installs into the system, as officially).
# The root filesystem is cached as made; slimming is cheap and done at each import.
make_base() {
    if podman image exists "$BASE_REF"; then return; fi
    local tar=$CACHE/base-$SUITE-$ARCH.tar root
    if [[ ! -s $tar ]]; then
        if [[ $ARCH == "$HOST_ARCH" ]]; then debootstrap_tar "$tar"; else swap_arch_tar "$tar"; fi
    fi
    root=$(mktemp -d "$CACHE/rootfs.XXXXXX")
    tar -C "$root" -xf "$tar"
    slim_rootfs "$root"
    tar -C "$root" --numeric-owner -c . \
        | podman import --arch "$ARCH" --change 'CMD ["python3"]' - "$BASE_REF" >/dev/null
    rm -rf "$root"
}

debian_mirror() {
    apt-get indextargets --format '$(SITE)' 2>/dev/null | grep -m1 '/debian$' \
        || echo http://deb.debian.org/debian
}

# The host's architecture: debootstrap, natively (about 2 minutes).
debootstrap_tar() {
    local tar=$1 mirror root
    mirror=$(debian_mirror)
    root=$(mktemp -d "$CACHE/rootfs.XXXXXX")
    log "debootstrap $SUITE/$HOST_ARCH from $mirror"
    debootstrap --arch="$HOST_ARCH" --variant=minbase \
        --include=python3,python3-pip,ca-certificates,netbase,tzdata \
        "$SUITE" "$root" "$mirror" >"$CACHE/debootstrap-$HOST_ARCH.log" 2>&1 \
        || { tail -20 "$CACHE/debootstrap-$HOST_ARCH.log" >&2; rm -rf "$root"; die "debootstrap failed"; }
    rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/* "$root"/var/log/*
    tar -C "$root" --numeric-owner -cf "$tar.part" .
    mv "$tar.part" "$tar"
    rm -rf "$root"
}

# The other architecture without running dpkg or maintainer scripts under emulation
# (debootstrap's second stage under qemu-user took about 17 minutes of a core): the host's
# debootstrapped tree with each architecture-dependent package swapped for the same
# version built for $ARCH: its files removed as dpkg listed them, the $ARCH .deb unpacked
# in their place, dpkg's records (file list, md5sums, scripts, Architecture) moved over.
# What the maintainer scripts made (users, alternatives, certificates, debconf, bytecode)
# does not depend on the architecture and is kept; the two caches that do, the dynamic
# linker's and iconv's, are remade by $ARCH's own ldconfig and iconvconfig (emulated, a
# second each). `dpkg --verify` then checks every packaged file against its md5sum.
swap_arch_tar() {
    local tar=$1 host_tar=$CACHE/base-$SUITE-$HOST_ARCH.tar attempt
    for attempt in 1 2; do
        [[ -s $host_tar ]] || debootstrap_tar "$host_tar"
        swap_arch_try "$tar" "$host_tar" && return
        # The archive has moved on since the host's tree was made: remake it, then again.
        [[ $attempt == 1 ]] && { log "the host's base is older than the archive: remaking it"; rm -f "$host_tar"; }
    done
    die "could not make the $ARCH base from the host's (see above)"
}

swap_arch_try() {
    local tar=$1 host_tar=$2 apt_dir=$CACHE/apt-$ARCH root info deb name key ctl f
    local host_triplet arch_triplet
    host_triplet=$(debarch_to_qemu "$HOST_ARCH")-linux-gnu
    arch_triplet=$(debarch_to_qemu "$ARCH")-linux-gnu
    rm -rf "$apt_dir"
    mkdir -p "$apt_dir/lists/partial" "$apt_dir/cache" "$apt_dir/debs"
    echo "deb [arch=$ARCH] $(debian_mirror) $SUITE main" > "$apt_dir/sources.list"
    : > "$apt_dir/status"
    local -a apt=(-qq -o "Dir::Etc::SourceList=$apt_dir/sources.list"
        -o Dir::Etc::SourceParts=/dev/null -o Dir::Etc::PreferencesParts=/dev/null
        -o "Dir::State::Lists=$apt_dir/lists" -o "Dir::State::Status=$apt_dir/status"
        -o "Dir::Cache=$apt_dir/cache" -o "APT::Architecture=$ARCH"
        -o "APT::Architectures::=$ARCH" -o Debug::NoLocking=1 -o APT::Sandbox::User=root)
    root=$(mktemp -d "$CACHE/rootfs.XXXXXX")
    info=$root/var/lib/dpkg/info
    tar -C "$root" -xf "$host_tar"
    local -a pkgs
    local want got
    mapfile -t pkgs < <(dpkg-query --admindir="$root/var/lib/dpkg" -W \
        -f '${Package}=${Version} ${Architecture}\n' | awk -v a="$HOST_ARCH" '$2 == a {print $1}')
    log "$ARCH base: ${#pkgs[@]} architecture-dependent packages of the $HOST_ARCH base swapped"
    # By name: a binary-only rebuild for one architecture has its own version (+bN).
    apt-get "${apt[@]}" update >&2 \
        && (cd "$apt_dir/debs" && apt-get "${apt[@]}" download "${pkgs[@]%%=*}" >&2) \
        || { rm -rf "$root"; return 1; }
    for deb in "$apt_dir"/debs/*.deb; do
        name=$(dpkg-deb -f "$deb" Package)
        want=$(printf '%s\n' "${pkgs[@]}" | awk -F= -v n="$name" '$1 == n {print $2}')
        got=$(dpkg-deb -f "$deb" Version)
        if [[ ${got%+b[0-9]*} != "${want%+b[0-9]*}" ]]; then
            log "$name: $ARCH has $got, the $HOST_ARCH base $want"
            rm -rf "$root"; return 1
        fi
        for key in "$name:$HOST_ARCH" "$name"; do [[ -f $info/$key.list ]] && break; done
        while IFS= read -r f; do
            if [[ -L $root$f || -f $root$f ]]; then rm -f "$root$f"; fi
        done < "$info/$key.list"
        for f in "$info/$key".*; do  # key.list, key.md5sums, ...; not python3.13.list of python3
            [[ ${f#"$info/$key."} == *.* ]] || rm -f "$f"
        done
        dpkg-deb -x "$deb" "$root"
        key=$name
        [[ $(dpkg-deb -f "$deb" Multi-Arch) == same ]] && key=$name:$ARCH
        dpkg-deb --fsys-tarfile "$deb" | tar -t | sed 's#^\./#/#; s#/$##; s#^$#/.#' > "$info/$key.list"
        ctl=$(mktemp -d "$CACHE/control.XXXXXX")
        dpkg-deb -e "$deb" "$ctl"
        for f in "$ctl"/*; do
            [[ ${f##*/} == control ]] || cp -p "$f" "$info/$key.${f##*/}"
        done
        rm -rf "$ctl"
    done
    sed -i "s/^Architecture: $HOST_ARCH\$/Architecture: $ARCH/" "$root/var/lib/dpkg/status"
    # What only the host's maintainer scripts made for the host's architecture.
    rm -rf "${root:?}/usr/lib/$host_triplet" "$root/usr/lib64" "$root/lib64" "$root/etc/ld.so.cache"
    chroot "$root" /sbin/ldconfig
    chroot "$root" /usr/sbin/iconvconfig -o "/usr/lib/$arch_triplet/gconv/gconv-modules.cache" 2>/dev/null || true
    if dpkg --root="$root" --verify >&2; then :; else rm -rf "$root"; die "$ARCH base: dpkg --verify failed"; fi
    [[ $(dpkg-query --admindir="$root/var/lib/dpkg" -W -f '${Architecture}\n' | grep -cx "$HOST_ARCH") == 0 ]] \
        || { rm -rf "$root"; die "$ARCH base: $HOST_ARCH packages left"; }
    rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
    tar -C "$root" --numeric-owner -cf "$tar.part" .
    mv "$tar.part" "$tar"
    rm -rf "$root" "$apt_dir"
}

# Only ever called with a fresh mktemp directory under $CACHE.
slim_rootfs() {
    local root=${1:?}
    [[ $root == "$CACHE"/rootfs.* && -d $root/usr ]] || die "slim_rootfs: refusing $root"
    mkdir -p "$root/etc/dpkg/dpkg.cfg.d"
    printf '%s\n' 'path-exclude /usr/share/doc/*' 'path-include /usr/share/doc/*/copyright' \
        'path-exclude /usr/share/man/*' 'path-exclude /usr/share/info/*' \
        'path-exclude /usr/share/locale/*' 'path-include /usr/share/locale/locale.alias' \
        'path-exclude /usr/share/lintian/*' > "$root/etc/dpkg/dpkg.cfg.d/slim"
    find "$root/usr/share/doc" -mindepth 1 -not -type d -not -name copyright -delete
    find "$root/usr/share/locale" -mindepth 1 -maxdepth 1 -not -name locale.alias \
        -exec rm -rf {} +
    rm -rf "$root"/usr/share/man/* "$root"/usr/share/info/* "$root"/usr/share/lintian/* \
        "$root"/usr/lib/python3*/EXTERNALLY-MANAGED
    ln -sf /usr/bin/python3 "$root/usr/local/bin/python"
}

# Every wheel the Dockerfile's `pip wheel .` needs for $ARCH, fetched on the host.
wheelhouse() {
    local machine key dir
    machine=$(debarch_to_qemu "$ARCH")
    key=$(cat pyproject.toml scripts/image.sh | sha256sum | cut -c1-16)
    dir=$CACHE/wheels/$ARCH/$key
    if [[ ! -f $dir/.complete ]]; then
        rm -rf "$dir"; mkdir -p "$dir"
        local -a reqs plats=()
        mapfile -t reqs < <(python3 -c '
import tomllib
p = tomllib.load(open("pyproject.toml", "rb"))
print(*p["build-system"]["requires"], *p["project"]["dependencies"], sep="\n")')
        local glibc
        for glibc in 17 28 34 39; do plats+=(--platform "manylinux_2_${glibc}_$machine"); done
        plats+=(--platform "manylinux2014_$machine")
        log "wheels for $ARCH (cp${PYVER/./}, binary only) into $dir"
        python3 -m pip download -q --dest "$dir" --only-binary=:all: \
            --python-version "$PYVER" --implementation cp "${plats[@]}" "${reqs[@]}" >&2 \
            || die "a runtime dependency has no wheel for $ARCH / CPython $PYVER (see above)"
        touch "$dir/.complete"
        # Older wheelhouses of this arch (other keys) are stale.
        find "$CACHE/wheels/$ARCH" -mindepth 1 -maxdepth 1 -not -name "$key" -exec rm -rf {} +
        local binary pure
        binary=$(cd "$dir" && ls -- *.whl | grep -v -- '-none-any\.whl$' | sed 's/-.*//' | paste -sd' ' || true)
        pure=$(cd "$dir" && ls -- *-none-any.whl | sed 's/-.*//' | paste -sd' ' || true)
        log "wheels for $ARCH: built for $machine: $binary; pure Python: $pure"
    fi
    echo "$dir"
}

build() {
    ensure_tools
    make_base
    # The Dockerfile's builder stage runs natively, on the host's own base.
    [[ $ARCH == "$HOST_ARCH" ]] || ARCH=$HOST_ARCH BASE_REF=$HOST_BASE_REF make_base
    local wheels conf
    wheels=$(wheelhouse)
    # The build reads wheels from the wheelhouse only: no network, index or certificates.
    conf=$CACHE/pip-build.conf
    printf '[global]\nno-index = true\nfind-links = /wheelhouse\n' > "$conf"
    log "building $IMAGE_REF"
    # --no-cache: buildah 1.28 reuses the final stage's `RUN --mount=...,from=builder` layer
    # when only the builder stage changed (seen here: a stale exporter in a "new" image).
    # Nothing slow is lost: the base is an image and the wheels come from the wheelhouse.
    podman build --no-cache --pull=never --arch "$ARCH" --network=none --build-arg "PYTHON_IMAGE=$BASE_REF" \
        --build-arg "BUILD_PYTHON_IMAGE=$HOST_BASE_REF" \
        --build-arg "BUILDPLATFORM=linux/$HOST_ARCH" --build-arg "TARGETPLATFORM=linux/$ARCH" \
        --build-arg "TARGETARCH=$ARCH" \
        -v "$wheels:/wheelhouse:ro" -v "$conf:/etc/pip.conf:ro" \
        -t "$IMAGE_REF" . >&2 || die "build of $IMAGE_REF failed"
    echo "$IMAGE_REF"
}

check() {
    ensure_tools
    podman image exists "$IMAGE_REF" || die "no image $IMAGE_REF: run 'bash scripts/image.sh build --arch $ARCH' first"
    if [[ $ARCH == "$HOST_ARCH" ]]; then
        PYTHONPATH=$PWD python3 scripts/image_check.py --image "$IMAGE_REF" "${CHECK_ARGS[@]}"
    else
        PYTHONPATH=$PWD python3 scripts/image_check.py --image "$IMAGE_REF" --emulated
    fi
}

# The CI tier (scripts/test.sh): the host's arch in full, and each thing the chart needs
# taken away must make the check fail; the other arch emulated (its smallest honest check).
ci() {
    local start=$SECONDS other taken
    other=$([[ $HOST_ARCH == amd64 ]] && echo arm64 || echo amd64)
    bash "$SELF" build --arch "$HOST_ARCH" >/dev/null
    bash "$SELF" check --arch "$HOST_ARCH"
    for taken in "--mutate hostPID" "--mutate SYS_PTRACE" "--mutate mount:proc" \
            "--mutate mount:cgroup" "--whole-cgroupfs"; do
        # shellcheck disable=SC2086  # two words: the flag and what it takes away
        if bash "$SELF" check --arch "$HOST_ARCH" $taken > "$CACHE/mutated.log"; then
            cat "$CACHE/mutated.log"
            die "the check passed with $taken: it cannot tell"
        fi
        echo "as it must, it fails with $taken: $(tail -1 "$CACHE/mutated.log")"
    done
    if [[ "${HEADROOM_IMAGE_FOREIGN:-1}" == 1 ]]; then
        bash "$SELF" build --arch "$other" >/dev/null
        bash "$SELF" check --arch "$other"
    else
        log "the $other image is not built (HEADROOM_IMAGE_FOREIGN=0)"
    fi
    echo "image tier: $((SECONDS - start)) s"
}

case $cmd in
    base) ensure_tools; make_base ;;
    build) build ;;
    check) check ;;
    ci) ci ;;
    *) usage ;;
esac
