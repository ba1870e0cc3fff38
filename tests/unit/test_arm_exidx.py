"""droidheapd's ARM EHABI reader on real code: tests/programs/ehabi_frames.c built for armeabi-v7a
as an app's code is (Thumb-2, -O2, -funwind-tables, lld), its .ARM.exidx found through
PT_ARM_EXIDX, each function's entry found and its instructions executed (ndk_client/tests/
arm_exidx_test with the file as argument), agreeing with llvm-readelf's decoding of the table."""
import re
import shutil
import subprocess

from tests.android import ROOT, compile_android_program
from tests.requirements import require

PROGRAM = ROOT / "tests" / "programs" / "ehabi_frames.c"
FUNCTIONS = ["main", "leaf", "many_registers", "floating", "large_frame", "dynamic_frame"]


def _entries(native_build, tmp_path):
    binary = compile_android_program(PROGRAM, tmp_path / "ehabi_frames", "armeabi-v7a")
    result = subprocess.run([str(native_build / "tests" / "arm_exidx_test"), str(binary)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    lines = re.findall(r"^(\w+) found at (0x[0-9a-f]+): ([0-9a-f ]+) -> ok sp\+(\d+)$",
                       result.stdout, re.M)
    found = {name: (opcodes.split(), int(sp)) for name, _, opcodes, sp in lines}
    starts = {int(start, 16): name for name, start, _, _ in lines}
    return binary, found, starts, result.stdout


def test_every_function_of_clang_armeabi_v7a_code_has_an_unwindable_entry(native_build, tmp_path):
    _, found, _, output = _entries(native_build, tmp_path)
    assert set(FUNCTIONS) <= set(found), output
    # Run on registers all pointing 0x800 into the stack: clang's Thumb-2 functions address their
    # frame through r7 (vsp = r7), whose record {r7, lr} ends 8 bytes above, where the caller's sp
    # is; the leaf saves nothing and returns through lr.
    assert found["leaf"] == (["b0", "b0", "b0"], 0)
    for name in FUNCTIONS[2:]:
        assert found[name][0][0] == "97" and found[name][1] == 0x800 + 8, (name, found[name])
    # d8-d14 saved by VPUSH: the VFP instruction class is in real code.
    assert "c9" in found["floating"][0], found["floating"]


def test_entries_agree_with_llvm_readelf(native_build, tmp_path):
    require("llvm-readelf is not installed (Debian: apt-get install llvm)"
            if shutil.which("llvm-readelf") is None else None)
    binary, found, starts, _ = _entries(native_build, tmp_path)
    listing = subprocess.run(["llvm-readelf", "-u", str(binary)], capture_output=True, text=True,
                             check=True).stdout
    compared = set()
    for entry in re.split(r"\n\s*Entry \{", listing)[1:]:
        # llvm-readelf names ARM-mode functions only: Thumb ones are matched by address.
        name = starts.get(int(re.search(r"FunctionAddress: (0x[0-9A-F]+)", entry)[1], 16))
        if name is None:
            continue
        opcodes = [b.lower()[2:] for line in re.findall(r"^\s*((?:0x[0-9A-F]{2} ?)+)\s*;", entry,
                                                        re.M)
                   for b in line.split()]
        ours = found[name][0]
        assert ours[:len(opcodes)] == opcodes, (name, ours, opcodes)
        assert all(b == "b0" for b in ours[len(opcodes):])  # the padding: finish
        compared.add(name)
    assert compared == set(found) >= set(FUNCTIONS), (compared, listing)
