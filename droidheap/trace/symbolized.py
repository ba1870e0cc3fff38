"""Writes `symbolized-trace`: the raw trace followed by one `module_symbols` packet per symbolized
mapping, which Perfetto's trace processor attaches to the frames of that mapping (matched by path
and build id) -- the same way `traceconv symbolize` output is appended to a heapprofd trace.

`ModuleSymbols.build_id` is declared `string` but the trace processor reads it as the raw build
id bytes (`BuildId::FromRaw`), the form heapprofd interns. Python protobuf refuses non-UTF-8 in a
string field, so that one field is encoded by hand and appended to the serialized message (field
order does not matter in protobuf).
"""
import pathlib
from typing import Dict, Iterable, Optional, Sequence, Tuple

from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

from droidheap.output_files import open_output
from droidheap.symbolizer import ModuleSymbols, SourceLine
from droidheap.trace.reader import as_text, encode_bytes_field, iter_fields

_TRACE_PACKET = pb.Trace.DESCRIPTOR.fields_by_name["packet"].number
_MODULE_SYMBOLS = pb.TracePacket.DESCRIPTOR.fields_by_name["module_symbols"].number
_BUILD_ID = pb.ModuleSymbols.DESCRIPTOR.fields_by_name["build_id"].number


def module_symbols_packet(module: ModuleSymbols) -> bytes:
    """One framed Trace.packet holding the module's symbols, ready to append to a trace."""
    message = pb.ModuleSymbols(path=module.path)
    for rel_pc, lines in sorted(module.lines.items()):
        address = message.address_symbols.add(address=rel_pc)
        for line in lines:
            address.lines.add(function_name=line.function, source_file_name=line.file,
                              line_number=line.line)
    body = message.SerializeToString()
    if module.build_id:
        body += encode_bytes_field(_BUILD_ID, bytes.fromhex(module.build_id))
    return encode_bytes_field(_TRACE_PACKET, encode_bytes_field(_MODULE_SYMBOLS, body))


def process_tree_packet(argvs: Dict[int, Sequence[str]]) -> bytes:
    """One framed Trace.packet naming the processes `argvs` gives (pid: command line)."""
    tree = pb.ProcessTree(processes=[pb.ProcessTree.Process(pid=pid, cmdline=list(argv))
                                     for pid, argv in sorted(argvs.items())])
    return encode_bytes_field(_TRACE_PACKET, pb.TracePacket(process_tree=tree).SerializeToString())


def write_symbolized_trace(raw: bytes, modules: Iterable[ModuleSymbols], out: pathlib.Path,
                           process_argvs: Optional[Dict[int, Sequence[str]]] = None) -> int:
    """Writes `raw` (the intact part of the raw trace: appending after a torn packet would bury
    the symbols in it) plus a packet per module with symbols, and one naming the processes of
    `process_argvs` (that the trace leaves unnamed); returns how many symbol packets were
    appended."""
    packets = [module_symbols_packet(m) for m in modules if m.lines]
    with open_output(out) as f:
        f.write(raw)
        for packet in packets:
            f.write(packet)
        if process_argvs:
            f.write(process_tree_packet(process_argvs))
    return len(packets)


def read_module_symbols(packets) -> Dict[Tuple[str, str], ModuleSymbols]:
    """The module_symbols packets of a trace (appended by us or by `traceconv symbolize`), by
    (path, build id hex): what a symbolized trace already says about its frames."""
    modules: Dict[Tuple[str, str], ModuleSymbols] = {}
    for packet in packets:
        if not packet.HasField("module_symbols"):
            continue
        message = packet.module_symbols
        raw_id = message.build_id  # bytes when not UTF-8 (raw, as written), else str
        build_id = (raw_id if isinstance(raw_id, bytes) else raw_id.encode("utf-8")).hex()
        path = as_text(message.path)
        module = modules.setdefault((path, build_id), ModuleSymbols(path, build_id))
        for address in message.address_symbols:
            lines = tuple(SourceLine(as_text(line.function_name), as_text(line.source_file_name),
                                     line.line_number)
                          for line in address.lines)
            if lines:
                module.lines[address.address] = lines
    return modules


def without_module_symbols(data: bytes) -> bytes:
    """The framed packets of `data` (intact ones only) minus those holding module_symbols: a
    trace symbolized before, re-symbolized, must not carry two sets for one mapping."""
    kept = bytearray()
    start = 0
    for field, _, value, end in iter_fields(data):
        if field != _TRACE_PACKET or not any(f == _MODULE_SYMBOLS
                                             for f, _, _, _ in iter_fields(value)):
            kept += data[start:end]
        start = end
    return bytes(kept)
