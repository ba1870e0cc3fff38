"""binfmt_misc registrations that run Android's arm64 and arm programs under qemu-user, as the
Android test device's programs are run: `python3 -m adbd.binfmt` (scripts/install_test_tools) or the device
itself at start, either any number of times.

Flags: F (the kernel opens the interpreter when it is registered, so a program started inside the
device's chroot, which has no /usr/libexec, still finds it) and P (argv[0] is passed on; Debian's
`*-binfmt-P` names tell qemu to take it, so a program's argv is a phone's). The interpreter is
Debian's dynamically linked qemu (package qemu-user): the device binds the host's loader and
libraries into its root for it, and a library named in the device's /etc/ld.so.preload, which
only glibc's loader reads, gives other processes a phone's view of each program's command line.

Registrations are the machine's, not this process's: an entry with the same magic but other flags
(Debian's qemu-user-binfmt registers without F) is replaced by ours under the same name.
"""
import pathlib
import subprocess
import sys
from typing import Dict

BINFMT_DIR = pathlib.Path("/proc/sys/fs/binfmt_misc")
_FLAGS = "PF"

# ELF identification and machine of each architecture (the e_ident bytes and e_machine), with
# the mask that ignores the OS ABI byte and the ET_EXEC / ET_DYN difference, as Debian's own.
_ENTRIES: Dict[str, Dict[str, str]] = {
    "qemu-aarch64": {
        "magic": r"\x7f\x45\x4c\x46\x02\x01\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x02\x00\xb7\x00",
        "mask": r"\xff\xff\xff\xff\xff\xff\xff\x00\xff\xff\xff\xff\xff\xff\xff\xff\xfe\xff\xff\xff",
        "interpreter": "/usr/libexec/qemu-binfmt/aarch64-binfmt-P",
    },
    "qemu-arm": {
        "magic": r"\x7f\x45\x4c\x46\x01\x01\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x02\x00\x28\x00",
        "mask": r"\xff\xff\xff\xff\xff\xff\xff\x00\xff\xff\xff\xff\xff\xff\xff\xff\xfe\xff\xff\xff",
        "interpreter": "/usr/libexec/qemu-binfmt/arm-binfmt-P",
    },
}


def _mounted() -> bool:
    return (BINFMT_DIR / "register").exists()


def _current(name: str) -> Dict[str, str]:
    """The registered entry `name` as its status file lists it ("interpreter", "flags", ...)."""
    try:
        lines = (BINFMT_DIR / name).read_text().splitlines()
    except OSError:
        return {}
    fields = {}
    for line in lines:
        key, _, value = line.partition(" ")
        fields[key.rstrip(":")] = value.strip()
    return fields


def register() -> None:
    """Makes the entries ours (raises OSError with the reason when it cannot)."""
    if not _mounted():
        subprocess.run(["mount", "-t", "binfmt_misc", "binfmt_misc", str(BINFMT_DIR)],
                       check=False, capture_output=True)
        if not _mounted():
            raise OSError(f"binfmt_misc is not mounted at {BINFMT_DIR} and cannot be (root?)")
    for name, entry in _ENTRIES.items():
        if not pathlib.Path(entry["interpreter"]).exists():
            raise OSError(f"{entry['interpreter']} is missing (apt-get install qemu-user "
                          f"qemu-user-binfmt)")
        current = _current(name)
        if (current.get("interpreter") == entry["interpreter"]
                and set(_FLAGS) <= set(current.get("flags", "")) and "enabled" in current):
            continue
        if current:
            (BINFMT_DIR / name).write_text("-1")  # removes it
        line = f":{name}:M::{entry['magic']}:{entry['mask']}:{entry['interpreter']}:{_FLAGS}"
        with open(BINFMT_DIR / "register", "w") as register_file:
            register_file.write(line)


if __name__ == "__main__":
    try:
        register()
    except OSError as e:
        print(f"binfmt: {e}", file=sys.stderr)
        sys.exit(1)
    print("binfmt: aarch64 and arm programs run under qemu-user (flags PF)")
