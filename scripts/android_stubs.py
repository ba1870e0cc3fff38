"""Stub shared libraries to link x86 and x86_64 Android builds against, where no library of
Android's for those ABIs is at hand (scripts/android_sysroot.sh runs this). A stub has the real
library's name, soname, exported symbols and symbol versions, and empty bodies: enough for the
linker to check every reference and write the NEEDED entries and versioned references a phone's
libraries satisfy; nothing built against it runs here.

libc.so's symbols come from bionic's libc.map.txt for the ABI and API level, as the NDK makes its
stubs: public version nodes only (no *_PRIVATE, *_PLATFORM), per-architecture tags, `introduced`
levels, no `apex` or `future` symbols. The other libraries' come from the same-bitness ARM library
of the rootfs (its dynamic symbol table, read with readelf)."""
import argparse
import collections
import pathlib
import re
import subprocess
import tempfile

ARCHES = {"arm", "arm64", "x86", "x86_64", "mips", "mips64"}
CODENAMES = {"G": 9, "I": 14, "J": 16, "J-MR1": 17, "J-MR2": 18, "K": 19, "L": 21, "L-MR1": 22,
             "M": 23, "N": 24, "N-MR1": 25, "O": 26, "O-MR1": 27, "P": 28, "Q": 29}
ABI_ARCH = {"x86_64": "x86_64", "x86": "x86"}


def _level(value: str) -> int:
    return CODENAMES[value] if value in CODENAMES else int(value)


def _wanted(tags: list, arch: str, api: int) -> bool:
    """Whether a symbol or version node with these libc.map.txt tags exists for arch at api."""
    if "apex" in tags or "future" in tags or "platform-only" in tags:
        return False
    arches = ARCHES.intersection(tags)
    if arches and arch not in arches:
        return False
    for tag in tags:
        key, _, value = tag.partition("=")
        if key in ("introduced", f"introduced-{arch}") and _level(value) > api:
            return False
    return True


def map_symbols(map_file: pathlib.Path, arch: str, api: int) -> dict:
    """{version: [(name, is_object)]} from a bionic symbol map."""
    versions = collections.OrderedDict()
    block, block_wanted = None, False
    for line in map_file.read_text().splitlines():
        code, _, comment = line.partition("#")
        code, tags = code.strip(), comment.split()
        opening = re.fullmatch(r"(\w+)\s*\{", code)
        if opening:
            block = opening.group(1)
            block_wanted = (not block.endswith(("_PRIVATE", "_PLATFORM"))
                            and _wanted(tags, arch, api))
            if block_wanted:
                versions[block] = []
        elif code.startswith("}"):
            block = None
        elif block and block_wanted and code.endswith(";") and ":" not in code:
            if _wanted(tags, arch, api):
                versions[block].append((code[:-1].strip(), "var" in tags))
    return versions


def elf_symbols(library: pathlib.Path) -> dict:
    """{version or None: [(name, is_object)]}: what a shared library defines and exports."""
    output = subprocess.run(["readelf", "--dyn-syms", "-W", str(library)], check=True,
                            capture_output=True, text=True).stdout
    versions = collections.OrderedDict()
    for line in output.splitlines():
        fields = line.split()
        # Num: Value Size Type Bind Vis Ndx Name[@[@]VERSION]
        if len(fields) < 8 or not fields[0].endswith(":") or fields[6] in ("UND", "ABS"):
            continue
        if fields[4] not in ("GLOBAL", "WEAK") or fields[3] not in ("FUNC", "OBJECT", "IFUNC"):
            continue
        name, _, version = fields[7].partition("@")
        versions.setdefault(version.lstrip("@") or None, []).append((name, fields[3] == "OBJECT"))
    return versions


def write_stub(versions: dict, soname: str, clang: str, target: str,
               out: pathlib.Path) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        source, script = pathlib.Path(tmp, "stub.S"), pathlib.Path(tmp, "stub.map")
        lines = []
        for symbols in versions.values():
            for name, is_object in symbols:
                section, kind = (".data", "%object") if is_object else (".text", "%function")
                lines += [f"{section}", f'.globl "{name}"', f'.type "{name}", {kind}',
                          f'"{name}":', ".zero 8", f'.size "{name}", 8']
        source.write_text("\n".join(lines) + "\n")
        command = [clang, f"--target={target}", "-shared", "-nostdlib", "-fuse-ld=lld",
                   f"-Wl,-soname,{soname}", str(source), "-o", str(out)]
        named = [v for v in versions if v is not None]
        if named:
            nodes = []
            for i, version in enumerate(named):
                names = "".join(f' "{name}";' for name, _ in versions[version])
                local = " local: *;" if i == 0 else ""
                nodes.append(f"{version} {{ global:{names}{local} }};")
            script.write_text("\n".join(nodes) + "\n")
            command.insert(-2, f"-Wl,--version-script={script}")
        subprocess.run(command, check=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clang", default="clang")
    parser.add_argument("--abi", required=True, choices=sorted(ABI_ARCH))
    parser.add_argument("--target", required=True, help="clang's, e.g. x86_64-linux-android29")
    parser.add_argument("--map", required=True, type=pathlib.Path, help="bionic's libc.map.txt")
    parser.add_argument("--api", required=True, type=int)
    parser.add_argument("--out", required=True, type=pathlib.Path, help="directory for the stubs")
    parser.add_argument("twins", nargs="*", type=pathlib.Path,
                        help="same-bitness ARM libraries to stub the other libraries from")
    args = parser.parse_args()
    write_stub(map_symbols(args.map, ABI_ARCH[args.abi], args.api), "libc.so", args.clang,
               args.target, args.out / "libc.so")
    for twin in args.twins:
        write_stub(elf_symbols(twin), twin.name, args.clang, args.target, args.out / twin.name)


if __name__ == "__main__":
    main()
