#!/usr/bin/env python3
"""Run a command on a real cgroup v2 kernel: Debian's own kernel booted under QEMU.

The host's memory controller may be cgroup v1 (this CI machine's is), but production
Kubernetes nodes mostly run v2. This boots the distribution kernel with a pure v2
hierarchy (``cgroup_no_v1=all``), shares the host's ``/`` read-only over 9p under a tmpfs
overlay (writes stay in the guest), attaches a scratch ext4 disk at ``/var/tmp`` (files on
the overlay are tmpfs, i.e. shmem; page-cache tests need a real disk), runs one command as
root in the root cgroup from the current directory, and returns its output and exit code
through a second, writable 9p share.

    python3 scripts/v2-guest.py prepare            # download and build only (cached)
    python3 scripts/v2-guest.py run [--timeout S] -- CMD [ARG...]

Everything is cached under ``.cache/v2-guest/`` (gitignored): the kernel package that
``linux-image-amd64`` depends on and ``busybox-static`` (``apt-get download`` +
``dpkg-deb -x``, never installed), the uncompressed vmlinux, the initramfs. Needs
``qemu-system-x86`` (``apt-get install --no-install-recommends qemu-system-x86``).

TCG only: this host's /dev/kvm comes from a paravirtualised hypervisor on which a stock
kernel hangs. A guest that does not finish in ``--timeout`` seconds is killed and the
run fails (exit 124) with the console and the output so far: never a hang.
"""

from __future__ import annotations

import argparse
import hashlib
import lzma
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CACHE = REPO / ".cache" / "v2-guest"
# Modules the initramfs loads, in this order after their dependencies: virtio transport,
# 9p over virtio, the overlay, and the scratch disk (ext4's checksum is crc32c).
MODULES = ("virtio_pci", "9pnet_virtio", "9p", "overlay", "virtio_blk", "crc32c_generic",
           "ext4")
GUEST_ENV = ("PATH", "PYTHONPATH", "LANG", "LC_ALL", "TERM")
XFER = "/run/headroom-guest"  # where the command, its output and exit code meet the host

INIT = r"""#!/bin/busybox sh
# Guest init: mount the host read-only under an overlay, run the command, power off.
B=/bin/busybox
fail() { echo "v2-guest init: $*"; $B poweroff -f; }
$B mkdir -p /proc /sys /dev /lower /upper /newroot
$B mount -t proc proc /proc
$B mount -t sysfs sys /sys
$B mount -t devtmpfs dev /dev
for m in $($B cat /modules.order); do $B insmod /modules/$m.ko || fail "insmod $m"; done
$B mount -t 9p -o trans=virtio,version=9p2000.L,ro,msize=262144,cache=loose hostroot /lower \
  || fail "9p host root"
$B mount -t tmpfs -o mode=0755 upper /upper
$B mkdir -p /upper/u /upper/w
$B mount -t overlay -o lowerdir=/lower,upperdir=/upper/u,workdir=/upper/w overlay /newroot \
  || fail overlay
N=/newroot
$B mount -t proc proc $N/proc
$B mount -t sysfs sys $N/sys
$B mount -t devtmpfs dev $N/dev
$B mkdir -p $N/dev/pts $N/dev/shm
$B mount -t devpts devpts $N/dev/pts
$B mount -t tmpfs -o mode=1777 shm $N/dev/shm
$B mount -t tmpfs -o mode=0755 run $N/run
# /tmp stays the host's, through the overlay (writes land in the tmpfs upper layer): a
# checkout under /tmp (a CI clone made with mktemp -d) must be visible in the guest.
$B mount -t cgroup2 cgroup2 $N/sys/fs/cgroup || fail cgroup2
$B mkdir -p $N@XFER@
$B mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144,cache=none xfer $N@XFER@ \
  || fail "9p xfer"
$B mount -t ext4 /dev/vda $N/var/tmp || fail "scratch disk"
$B chmod 1777 $N/var/tmp
$B ip link set lo up
$B chroot $N /bin/sh @XFER@/cmd.sh > $N@XFER@/output 2>&1
echo $? > $N@XFER@/rc
$B sync
$B umount $N@XFER@
$B poweroff -f
""".replace("@XFER@", XFER)


@dataclass(frozen=True)
class Guest:
    kernel: Path  # uncompressed vmlinux (PVH entry: about 2.5 s faster a boot under TCG)
    initrd: Path
    release: str


def log(msg: str) -> None:
    print(f"v2-guest: {msg}", file=sys.stderr, flush=True)


# --- prepare: download, extract, build (cached) --------------------------------------


def kernel_package() -> str:
    """The versioned package Debian's ``linux-image-amd64`` points at (generic flavour:
    the -cloud one has no 9p)."""
    out = subprocess.run(["apt-cache", "depends", "linux-image-amd64"], check=True,
                         capture_output=True, text=True).stdout
    for line in out.splitlines():
        m = re.match(r"\s*Depends:\s*(linux-image-\S+-amd64)$", line)
        if m:
            return m[1]
    raise SystemExit(f"v2-guest: no kernel package in apt-cache depends output:\n{out}")


def download(package: str, dest: Path) -> Path:
    debs = dest / "debs"
    debs.mkdir(parents=True, exist_ok=True)
    found = sorted(debs.glob(f"{package}_*.deb"))
    if not found:
        log(f"apt-get download {package}")
        subprocess.run(["apt-get", "download", "-q", "-o", "APT::Sandbox::User=root",
                        package], cwd=debs, check=True, stdout=subprocess.DEVNULL)
        found = sorted(debs.glob(f"{package}_*.deb"))
    if not found:
        raise SystemExit(f"v2-guest: apt-get download {package} left no .deb")
    return found[-1]


def extract(deb: Path, into: Path) -> None:
    subprocess.run(["dpkg-deb", "-x", str(deb), str(into)], check=True)


def vmlinux_from_bzimage(bzimage: bytes) -> bytes:
    """The kernel ELF inside a bzImage: Debian compresses the payload with xz."""
    start = bzimage.find(b"\xfd7zXZ\x00")
    if start < 0:
        raise SystemExit("v2-guest: no xz payload in the kernel image")
    elf = lzma.LZMADecompressor(lzma.FORMAT_XZ).decompress(bzimage[start:])
    if not elf.startswith(b"\x7fELF"):
        raise SystemExit("v2-guest: the kernel payload is not an ELF image")
    return elf


_DEPENDS = re.compile(rb"(?:^|\0)depends=([^\0]*)\0")


def module_order(moddir: Path, wanted: tuple[str, ...]) -> list[Path]:
    """The .ko files for ``wanted`` and their dependencies, dependencies first.

    The .deb ships no modules.dep (depmod would make it; kmod is not always installed),
    so read each module's own ``depends=`` field from its .modinfo strings."""
    index = {p.name.removesuffix(".ko").replace("-", "_"): p
             for p in moddir.rglob("*.ko")}
    order: list[Path] = []
    seen: set[str] = set()

    def visit(name: str) -> None:
        name = name.replace("-", "_")
        if name in seen:
            return
        seen.add(name)
        path = index.get(name)
        if path is None:
            raise SystemExit(f"v2-guest: module {name} not found under {moddir}")
        m = _DEPENDS.search(path.read_bytes())
        for dep in (m[1].decode().split(",") if m and m[1] else []):
            visit(dep)
        order.append(path)

    for name in wanted:
        visit(name)
    return order


def cpio_newc(entries: list[tuple[str, int, bytes, int]]) -> bytes:
    """An uncompressed newc archive: (name, mode, data, rdev) each (rdev for devices)."""
    out = bytearray()

    def pad() -> None:
        out.extend(b"\0" * (-len(out) % 4))

    for ino, (name, mode, data, rdev) in enumerate([*entries, ("TRAILER!!!", 0, b"", 0)],
                                                   start=1):
        raw = name.encode() + b"\0"
        fields = (ino, mode, 0, 0, 1, 0, len(data), 0, 0, rdev >> 8, rdev & 0xFF, len(raw), 0)
        out.extend(b"070701" + b"".join(b"%08X" % f for f in fields) + raw)
        pad()
        out.extend(data)
        pad()
    return bytes(out)


def prepare(cache: Path = CACHE) -> Guest:
    stamp = cache / "ready"
    # The initramfs embeds INIT: a cache built with another init script is built again.
    init_id = hashlib.sha256(INIT.encode()).hexdigest()[:16]
    if stamp.exists():
        release, _, built_for = stamp.read_text().strip().partition(" ")
        if built_for == init_id:
            return Guest(cache / f"vmlinux-{release}", cache / f"initrd-{release}.cpio",
                         release)
    if shutil.which("qemu-system-x86_64") is None:
        raise SystemExit("v2-guest: qemu-system-x86_64 not found (apt-get install "
                         "--no-install-recommends qemu-system-x86)")
    t0 = time.monotonic()
    cache.mkdir(parents=True, exist_ok=True)
    root = cache / "root"
    shutil.rmtree(root, ignore_errors=True)
    for package in (kernel_package(), "busybox-static"):
        extract(download(package, cache), root)
    release = next((root / "lib/modules").iterdir()).name
    bz = (root / "boot" / f"vmlinuz-{release}").read_bytes()
    (cache / f"vmlinux-{release}").write_bytes(vmlinux_from_bzimage(bz))
    modules = module_order(root / "lib/modules" / release / "kernel", MODULES)
    dirs = ["bin", "dev", "modules", "proc", "sys"]
    entries: list[tuple[str, int, bytes, int]] = [(d, 0o40755, b"", 0) for d in dirs]
    entries += [
        ("dev/console", 0o20600, b"", (5 << 8) | 1),  # init's stdio before devtmpfs
        ("bin/busybox", 0o100755, (root / "bin/busybox").read_bytes(), 0),
        ("init", 0o100755, INIT.encode(), 0),
        ("modules.order", 0o100644,
         "".join(p.name.removesuffix(".ko") + "\n" for p in modules).encode(), 0),
    ]
    entries += [(f"modules/{p.name}", 0o100644, p.read_bytes(), 0) for p in modules]
    (cache / f"initrd-{release}.cpio").write_bytes(cpio_newc(entries))
    shutil.rmtree(root)  # 400 MB of modules: only the few above are needed
    stamp.write_text(f"{release} {init_id}\n")
    log(f"prepared kernel {release} in {time.monotonic() - t0:.1f} s")
    return prepare(cache)


# --- run ------------------------------------------------------------------------------


def command_script(argv: list[str], cwd: Path, env: dict[str, str]) -> str:
    lines = ["set -e", f"cd {shlex.quote(str(cwd))}"]
    lines += [f"export {k}={shlex.quote(v)}" for k, v in sorted(env.items())]
    lines += ["export HEADROOM_GUEST=v2 TMPDIR=/var/tmp HOME=/root", "set +e",
              "exec " + shlex.join(argv)]
    return "\n".join(lines) + "\n"


def scratch_disk(path: Path, size_mib: int) -> None:
    """A sparse ext4 image, made on the host (mkfs under TCG is slow)."""
    with path.open("wb") as f:
        f.truncate(size_mib << 20)
    subprocess.run(["mkfs.ext4", "-q", "-F", "-N", "8192",
                    "-E", "lazy_itable_init=0,lazy_journal_init=0", str(path)], check=True)


def run(argv: list[str], timeout: float, memory: str, cpus: int, disk_mib: int,
        stream: bool) -> int:
    guest = prepare()
    env = {k: os.environ[k] for k in GUEST_ENV if k in os.environ}
    env.update({k: v for k, v in os.environ.items() if k.startswith("HEADROOM_")})
    with tempfile.TemporaryDirectory(prefix="headroom-v2-guest-") as tmp:
        work = Path(tmp)
        xfer = work / "xfer"
        xfer.mkdir()
        (xfer / "cmd.sh").write_text(command_script(argv, Path.cwd(), env))
        scratch_disk(work / "scratch.img", disk_mib)
        console = work / "console.log"
        qemu = [
            "qemu-system-x86_64", "-accel", "tcg", "-m", memory, "-smp", str(cpus),
            "-kernel", str(guest.kernel), "-initrd", str(guest.initrd),
            "-append", "console=ttyS0 panic=-1 quiet loglevel=3 cgroup_no_v1=all psi=1",
            "-nographic", "-no-reboot", "-nic", "none", "-monitor", "none",
            "-virtfs", "local,path=/,mount_tag=hostroot,security_model=none,readonly=on,"
                       "multidevs=remap",
            "-virtfs", f"local,path={xfer},mount_tag=xfer,security_model=none",
            "-drive", f"file={work / 'scratch.img'},if=virtio,format=raw",
        ]
        t0 = time.monotonic()
        with console.open("wb") as con:
            proc = subprocess.Popen(qemu, stdin=subprocess.DEVNULL, stdout=con,
                                    stderr=subprocess.STDOUT)
            shown, timed_out = _follow(proc, xfer / "output", t0 + timeout, stream)
        wall = time.monotonic() - t0
        output = (xfer / "output").read_bytes() if (xfer / "output").exists() else b""
        if stream:
            sys.stdout.buffer.write(output[shown:])
        else:
            sys.stdout.buffer.write(output)
        sys.stdout.flush()
        rc_file = xfer / "rc"
        if timed_out:
            log(f"guest killed after {timeout:.0f} s (timeout); console:\n"
                + _tail(console))
            return 124
        if not rc_file.exists():
            log(f"guest stopped (qemu exit {proc.returncode}) without the command's exit "
                f"code after {wall:.1f} s; console:\n" + _tail(console))
            return 125
        rc = int(rc_file.read_text().strip() or 125)
        log(f"kernel {guest.release}, cgroup v2: command exited {rc}; "
            f"guest wall time {wall:.1f} s")
        return rc


def _follow(proc: subprocess.Popen[bytes], output: Path, deadline: float,
            stream: bool) -> tuple[int, bool]:
    """Wait for qemu, streaming the command's output as it grows; kill at the deadline.
    Returns the bytes of output shown and whether the deadline passed."""
    shown = 0
    while True:
        try:
            proc.wait(timeout=1.0)
            return shown, False
        except subprocess.TimeoutExpired:
            pass
        if stream and output.exists():
            data = output.read_bytes()[shown:]
            if b"\n" in data:
                data = data[: data.rindex(b"\n") + 1]
                sys.stdout.buffer.write(data)
                sys.stdout.flush()
                shown += len(data)
        if time.monotonic() > deadline:
            proc.kill()
            proc.wait()
            return shown, True


def _tail(path: Path, lines: int = 60) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no console log)"
    return "\n".join(text.splitlines()[-lines:])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="action", required=True)
    sub.add_parser("prepare", help="download and build the guest (cached)")
    r = sub.add_parser("run", help="boot the guest and run a command in it")
    r.add_argument("--timeout", type=float, default=900.0,
                   help="seconds before the guest is killed (exit 124)")
    r.add_argument("--memory", default="2G")
    r.add_argument("--cpus", type=int, default=2)
    r.add_argument("--disk-mib", type=int, default=1024, help="scratch disk at /var/tmp")
    r.add_argument("--no-stream", action="store_true",
                   help="print the output at the end instead of as it comes")
    r.add_argument("command", nargs=argparse.REMAINDER)
    args = ap.parse_args()
    if args.action == "prepare":
        g = prepare()
        print(f"{g.kernel}\n{g.initrd}")
        return 0
    cmd = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not cmd:
        ap.error("run needs a command after --")
    return run(cmd, args.timeout, args.memory, args.cpus, args.disk_mib, not args.no_stream)


if __name__ == "__main__":
    sys.exit(main())
