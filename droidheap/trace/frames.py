"""The frames of a trace's call stacks as the readers keep them: each Mapping, Frame and Sample a
value (a frozen dataclass or a tuple), made once per distinct entry of a trace and shared by every
dump that has it (heap_dumps.py, interned_state.py).

Names follow Perfetto's trace processor (see heap_dumps.py): a mapping's path is "/" + component
for each path component, with a leading "//" reduced to "/".
"""
import dataclasses
import functools
from typing import NamedTuple, Tuple

PSEUDO_PREFIX = "[droidheap"
# The mapping of heapprofd's unwinding errors: one component "ERROR", its frames named "ERROR N".
HEAPPROFD_ERROR_PATH = "/ERROR"


@dataclasses.dataclass(frozen=True)
class Mapping:
    path: str      # as the trace processor names it (see the module docstring)
    build_id: str  # lower-case hex; "" when unknown
    start: int = 0
    end: int = 0
    offset: int = 0  # file offset of `start`
    load_bias: int = 0
    # File offset of the ELF file's first byte: where an APK stores the library, else 0.
    elf_offset: int = 0

    @functools.cached_property  # asked of every frame by every writer
    def is_pseudo(self) -> bool:
        """Frames the daemon made up (unwind errors, ...): named by their path, never symbolized.
        Path joining turns the component "[droidheap: x]" into "/[droidheap: x]"."""
        return self.display_path.startswith(PSEUDO_PREFIX) or self.path == HEAPPROFD_ERROR_PATH

    @property
    def display_path(self) -> str:
        # "/[vdso]", "/[droidheap: unwind error]": one component that was never a file path.
        return self.path[1:] if self.path.startswith("/[") else self.path

    @property
    def elf_file_offset(self) -> int:
        """The ELF file's own offset of `start`."""
        return self.offset - self.elf_offset

    def pc(self, rel_pc: int) -> int:
        """The process address of `rel_pc` (rel_pc = pc - start + elf_file_offset + load_bias)."""
        return max(0, rel_pc - self.load_bias - self.elf_file_offset + self.start)


class Frame(NamedTuple):
    """A tuple: a trace has one per distinct frame, and a large one hundreds of thousands."""
    mapping: Mapping
    rel_pc: int
    function_name: str = ""  # when the trace itself names the frame


class Sample(NamedTuple):
    """One call stack's figures in one dump: a tuple, as there is one per stack of every dump."""
    frames: Tuple[Frame, ...]  # root (outermost caller) first, as in the trace
    self_allocated: int = 0    # cumulative since the process connected
    self_freed: int = 0
    alloc_count: int = 0
    free_count: int = 0

    @property
    def in_use(self) -> int:
        return self.self_allocated - self.self_freed
